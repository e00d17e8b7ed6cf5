#!/usr/bin/env bash
# An equivalent of the Dockerfile's pinned base (python:3.11-slim: Debian bookworm with Python 3.11)
# built from Debian's own packages, for machines that cannot pull from a public registry: mmdebstrap
# (https://manpages.debian.org/bookworm/mmdebstrap/mmdebstrap.1.en.html) bootstraps bookworm's
# minbase variant plus python3 (3.11 in bookworm) into a tarball, cached outside the repo and keyed
# by its package set, and `podman import` turns it into an image.
# Prints the image's name on its last line.
set -euo pipefail
SUITE=bookworm
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
dir="$cache_root/base-$SUITE-python3-v2"
name="localhost/priogate-base:$SUITE-python3"
mkdir -p "$dir"
if [ ! -s "$dir/rootfs.tar" ]; then
  t0=$SECONDS
  echo ">> building the base from Debian packages: mmdebstrap --variant=minbase $SUITE + python3 (about a minute)" >&2
  # python-is-python3: the Dockerfile runs `python`, as on the official image.
  mmdebstrap --quiet --format=tar --variant=minbase --include=python3,python-is-python3 \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
    "$SUITE" "$dir/rootfs.tar.tmp"
  mv "$dir/rootfs.tar.tmp" "$dir/rootfs.tar"
  echo ">> base rootfs built in $((SECONDS - t0)) s: $dir/rootfs.tar" >&2
fi
# Re-import when the tarball is newer than the image (or there is no image).
stamp="$dir/imported-id"
if ! podman image exists "$name" || [ ! -s "$stamp" ] || [ "$(podman image inspect --format '{{.Id}}' "$name")" != "$(cat "$stamp")" ]; then
  podman import --quiet --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' "$dir/rootfs.tar" "$name" >/dev/null
  podman image inspect --format '{{.Id}}' "$name" > "$stamp"
fi
echo "$name"
