#!/usr/bin/env bash
# make image: build the priogate image from the shipped Dockerfile with buildah, rootless-free and
# daemonless (https://github.com/containers/buildah/blob/main/docs/buildah-build.1.md).
#
# - Installs what it needs (buildah, podman, runc, mmdebstrap) with apt-get when run as root on a
#   fresh Debian/Ubuntu machine; elsewhere it prints the command and fails. Idempotent.
# - The base is the Dockerfile's pinned BASE; when that cannot be pulled (no route to the public
#   registry), an equivalent built from Debian bookworm's packages (hack/image/base.sh), and it says
#   so. BASE=... in the environment picks one outright.
# - PIP_CERT (a CA bundle file, e.g. behind a TLS-inspecting proxy) reaches pip as a build secret,
#   never as a layer.
# Prints the image's name on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
IMAGE=${IMAGE:-localhost/priogate}
VERSION=${VERSION:-$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$root/priogate/__init__.py")}
TAG=${TAG:-$VERSION}
t_start=$SECONDS

need=()
for pair in buildah:buildah podman:podman runc:runc mmdebstrap:mmdebstrap; do
  command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo ">> installing ${need[*]}: apt-get install -y ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "error: make image needs ${need[*]}. Install them, then run make image again:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${need[*]}    # Debian/Ubuntu" >&2
    exit 1
  fi
fi

pinned=$(sed -n 's/^ARG BASE=//p' "$root/Dockerfile")
if [ -z "${BASE:-}" ]; then
  if podman image exists "docker.io/library/$pinned" \
    || timeout 120 podman pull --quiet "docker.io/library/$pinned" >/dev/null 2>"${TMPDIR:-/tmp}/priogate-pull.err"; then
    BASE="docker.io/library/$pinned"
    echo ">> base: the Dockerfile's pinned $pinned" >&2
  else
    echo ">> the pinned base $pinned cannot be pulled here: $(tail -1 "${TMPDIR:-/tmp}/priogate-pull.err")" >&2
    BASE=$(bash "$here/base.sh")
    echo ">> base: $BASE, an EQUIVALENT built from Debian bookworm packages (python3 3.11), NOT the pinned image" >&2
  fi
fi

secret=()
cert=${PIP_CERT:-}
if [ -n "$cert" ] && [ -s "$cert" ]; then secret=(--secret "id=pipcert,src=$cert"); fi
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$root" status --porcelain 2>/dev/null)" ]; then revision="$revision-dirty"; fi
source_url=${SOURCE:-$(git -C "$root" config --get remote.origin.url 2>/dev/null || true)}

t0=$SECONDS
echo ">> buildah build $IMAGE:$TAG (BASE=$BASE)" >&2
# --isolation chroot: RUN steps need no OCI runtime (crun cannot run on a cgroups v1 hybrid host).
# --layers: reuse unchanged steps, so a rebuild after a code change only re-copies the code.
# The labels that change per build go in as --label as well: with --layers, buildah 1.28 reuses a
# cached LABEL step whose ARG changed, which left the previous build's revision on the image.
buildah build --quiet --isolation chroot --layers "${secret[@]}" \
  --build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" \
  --build-arg "REVISION=$revision" --build-arg "SOURCE=$source_url" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.revision=$revision" \
  --label "org.opencontainers.image.source=$source_url" \
  -t "$IMAGE:$TAG" -f "$root/Dockerfile" "$root" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$IMAGE:$TAG")
echo ">> built $IMAGE:$TAG in $((SECONDS - t0)) s (all of make image: $((SECONDS - t_start)) s); size $((size / 1000000)) MB ($size bytes)" >&2
echo "$IMAGE:$TAG"
