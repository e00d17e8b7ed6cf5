#!/usr/bin/env bash
# make test-image: the built image starts its two programs (python -m webhook --help, python -m
# controller --help exit 0), as the non-root user, and carries its OCI labels.
# podman runs it with runc: crun refuses a cgroups v1 hybrid host ("cgroups in hybrid mode not
# supported"). The rlimits are set low: podman's defaults (nofile 1048576, nproc 4194304) are
# above this machine's hard limits, and raising a hard limit needs CAP_SYS_RESOURCE, which a
# container or a restricted VM may not hold ("error setting rlimit type 7: operation not permitted").
set -euo pipefail
image=${1:?usage: test.sh IMAGE}
runtime=$(command -v runc || echo /usr/sbin/runc)
nofile=4096 nproc=4096
run() {
  podman run --runtime "$runtime" --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" \
    --network none --read-only --rm "$image" "$@"
}
fail=0
for prog in webhook controller; do
  if out=$(run python -m "$prog" --help 2>&1) && grep -q "usage: python -m $prog" <<<"$out"; then
    echo "ok   python -m $prog --help"
  else
    echo "FAIL python -m $prog --help:"; echo "$out" | tail -5; fail=1
  fi
done
uid=$(run id -u)
if [ "$uid" = 65532 ]; then echo "ok   runs as uid 65532"; else echo "FAIL runs as uid $uid, not 65532"; fail=1; fi
for label in title version source licenses revision; do
  v=$(podman image inspect --format "{{index .Labels \"org.opencontainers.image.$label\"}}" "$image")
  # source is empty when the clone has no remote (SOURCE=... sets it)
  if [ "$label" = source ] || { [ -n "$v" ] && [ "$v" != "<no value>" ]; }; then
    echo "ok   label org.opencontainers.image.$label=$v"
  else
    echo "FAIL label org.opencontainers.image.$label missing"; fail=1
  fi
done
# The revision is this checkout's (a stale one would mean a cached label from an earlier build).
want=$(git -C "$(dirname "$0")" rev-parse HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$(dirname "$0")" status --porcelain 2>/dev/null)" ]; then want="$want-dirty"; fi
got=$(podman image inspect --format '{{index .Labels "org.opencontainers.image.revision"}}' "$image")
if [ "$got" = "$want" ]; then echo "ok   revision is this checkout's ($want)"; else echo "FAIL revision $got, not this checkout's $want"; fail=1; fi
exit $fail
