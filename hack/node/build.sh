#!/usr/bin/env bash
# Build a real node's kubelet and its sandbox's pause from the Go module proxy, from the
# same pinned k8s.io/kubernetes as the control plane (hack/lib/k8s.sh), into a version-keyed cache
# directory beside it. A separate module (hack/node/go.mod) so that the node's extra dependencies
# (cri-streaming, cadvisor, ...) never move the control plane's pins. No kube-proxy: the node routes
# without it (localcluster/node.py says how).
# Prints the directory on its last line. Skips the build when the directory is complete.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/k8s.sh"  # K8S_VERSION, k8s_version_ldflags

command -v go >/dev/null || { echo "error: 'go' is not installed; the node is built from source with Go >= 1.26" >&2; exit 1; }
go_version=$(go env GOVERSION)
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
out="$cache_root/node-$K8S_VERSION-$go_version"
bins=(kubelet pause)

complete=1
for b in "${bins[@]}"; do [ -x "$out/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then echo "$out"; exit 0; fi

# Static (CGO_ENABLED=0), as the control plane is built.
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$out.partial"
ld=$(k8s_version_ldflags)
echo ">> building the node (kubelet, pause) into $out" >&2
echo ">> kubelet shares most packages with the control plane: seconds when the control plane was built first; with an empty Go build cache about 5 minutes on 2 cores (15 when they are busy)" >&2
step=0
total=1
for pair in kubelet:k8s.io/kubernetes/cmd/kubelet; do
  name=${pair%%:*} pkg=${pair#*:}
  step=$((step + 1))
  if [ -x "$out.partial/$name" ]; then echo ">> [$step/$total] $name: already built" >&2; continue; fi
  t0=$SECONDS
  echo ">> [$step/$total] $name: go build $pkg ..." >&2
  (cd "$here" && go build -tags grpcnotrace -ldflags "$ld" -o "$out.partial/$name.tmp" "$pkg")
  mv "$out.partial/$name.tmp" "$out.partial/$name"
  echo ">> [$step/$total] $name: done in $((SECONDS - t0)) s" >&2
done
# pause (hack/node/pause/main.go): the sandbox image's one binary (localcluster/node.py).
if [ ! -x "$out.partial/pause" ]; then
  (cd "$here" && go build -ldflags "-s -w" -o "$out.partial/pause.tmp" ./pause)
  mv "$out.partial/pause.tmp" "$out.partial/pause"
fi
rm -rf "$out"
mv "$out.partial" "$out"
echo ">> node ready: $("$out/kubelet" --version)" >&2
echo "$out"
