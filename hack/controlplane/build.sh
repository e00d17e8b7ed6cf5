#!/usr/bin/env bash
# Build the local control plane (kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
# kwok) from the Go module proxy into a version-keyed cache directory outside the repo.
# Prints the directory on its last line. Skips the build when the directory is complete.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/k8s.sh"  # K8S_VERSION, k8s_version_ldflags
ETCD_VERSION=v3.6.8
KWOK_VERSION=v0.8.0

command -v go >/dev/null || { echo "error: 'go' is not installed; the control plane is built from source with Go >= 1.26" >&2; exit 1; }
go_version=$(go env GOVERSION)
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
out="$cache_root/cp-$K8S_VERSION-etcd$ETCD_VERSION-kwok$KWOK_VERSION-$go_version"
bins=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

complete=1
for b in "${bins[@]}"; do [ -x "$out/$b" ] || complete=0; done
if [ "$complete" = 1 ]; then echo "$out"; exit 0; fi

export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$out.partial"
ld=$(k8s_version_ldflags)

echo ">> building the control plane into $out" >&2
echo ">> the first build compiles Kubernetes from source: about 12 minutes on 2 cores (plus module downloads); later runs reuse it" >&2
step=0
total=${#bins[@]}
build() {  # name, package
  step=$((step + 1))
  if [ -x "$out.partial/$1" ]; then echo ">> [$step/$total] $1: already built" >&2; return; fi
  local t0=$SECONDS
  echo ">> [$step/$total] $1: go build $2 ..." >&2
  (cd "$here" && go build -tags grpcnotrace -ldflags "$ld" -o "$out.partial/$1.tmp" "$2")
  mv "$out.partial/$1.tmp" "$out.partial/$1"
  echo ">> [$step/$total] $1: done in $((SECONDS - t0)) s" >&2
}
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
step=$((step + 1))
if [ ! -x "$out.partial/kwok" ]; then
  t0=$SECONDS
  echo ">> [$step/$total] kwok: go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION ..." >&2
  (cd / && GOBIN="$out.partial" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
  echo ">> [$step/$total] kwok: done in $((SECONDS - t0)) s" >&2
fi
# kwok v0.8 needs its stage definitions; they ship in its module.
stages_src=$(cd / && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$out.partial/kwok-stages"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  cp "$stages_src/kustomize/stage/$f" "$out.partial/kwok-stages/$(echo "$f" | tr / -)"
done
chmod -R u+w "$out.partial"
rm -rf "$out"
mv "$out.partial" "$out"
echo ">> control plane ready: $("$out/kube-apiserver" --version)" >&2
echo "$out"
