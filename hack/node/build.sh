#!/usr/bin/env bash
# Build a real node's Kubernetes binaries (kubelet, kube-proxy) from the Go module proxy, from the
# same pinned k8s.io/kubernetes as the control plane (hack/lib/k8s.sh), into a version-keyed cache
# directory beside it. A separate module (hack/node/go.mod) so that the node's extra dependencies
# (cri-streaming, netlink, knftables, ...) never move the control plane's pins.
# Prints the directory on its last line. Skips the build when the directory is complete.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/k8s.sh"  # K8S_VERSION, k8s_version_ldflags

command -v go >/dev/null || { echo "error: 'go' is not installed; the node is built from source with Go >= 1.26" >&2; exit 1; }
go_version=$(go env GOVERSION)
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
out="$cache_root/node-$K8S_VERSION-$go_version"
bins=(kubelet kube-proxy)

complete=1
for b in "${bins[@]}"; do [ -x "$out/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then echo "$out"; exit 0; fi

# Static, like upstream's release kubelet and kube-proxy (hack/lib/golang.sh builds them with
# CGO_ENABLED=0 unless told otherwise).
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$out.partial"
ld=$(k8s_version_ldflags)
echo ">> building the node (kubelet, kube-proxy) into $out" >&2
echo ">> kubelet shares most packages with the control plane; cold, about 6 minutes on 2 cores" >&2
step=0
total=${#bins[@]}
for pair in kubelet:k8s.io/kubernetes/cmd/kubelet kube-proxy:k8s.io/kubernetes/cmd/kube-proxy; do
  name=${pair%%:*} pkg=${pair#*:}
  step=$((step + 1))
  if [ -x "$out.partial/$name" ]; then echo ">> [$step/$total] $name: already built" >&2; continue; fi
  t0=$SECONDS
  echo ">> [$step/$total] $name: go build $pkg ..." >&2
  (cd "$here" && go build -tags grpcnotrace -ldflags "$ld" -o "$out.partial/$name.tmp" "$pkg")
  mv "$out.partial/$name.tmp" "$out.partial/$name"
  echo ">> [$step/$total] $name: done in $((SECONDS - t0)) s" >&2
done
rm -rf "$out"
mv "$out.partial" "$out"
echo ">> node ready: $("$out/kubelet" --version)" >&2
echo "$out"
