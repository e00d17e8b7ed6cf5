#!/usr/bin/env bash
# Build upstream's e2e test binary (e2e.test) from the pinned k8s.io/kubernetes module, the same
# version as the local control plane (hack/controlplane/build.sh), into a version-keyed cache
# directory outside the repo. Prints the binary's path on its last line. Skips the build when the
# binary is there. hack/upstream/run.py runs it against the local control plane.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/k8s.sh"  # K8S_VERSION, k8s_version_ldflags

command -v go >/dev/null || { echo "error: 'go' is not installed; upstream's e2e.test is built from source with Go >= 1.26" >&2; exit 1; }
go_version=$(go env GOVERSION)
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
out="$cache_root/e2e-$K8S_VERSION-$go_version"
if [ -x "$out/e2e.test" ]; then echo "$out/e2e.test"; exit 0; fi

# The same flags as the control plane build, so that the packages both compile (client-go,
# apimachinery, apiserver, ...) come from the Go build cache instead of being compiled twice.
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
# The version stamp upstream's hack/lib/version.sh (kube::version::ldflags) sets; `e2e.test
# --version` prints it.
ld=$(k8s_version_ldflags)

mkdir -p "$out"
echo ">> building upstream's e2e.test ($K8S_VERSION) into $out" >&2
echo ">> the first build compiles the whole e2e suite from source (its time: docs/benchmarks.md); later runs reuse it" >&2
t0=$SECONDS
echo ">> [1/1] e2e.test: go test -c k8s.io/kubernetes/test/e2e ..." >&2
# go.mod/go.sum here pin the module graph (deps.go lists the test binary's imports). -vet=off:
# go test vets the package it tests, and vet first analyses every dependency for its facts, which
# would nearly double the build for nothing we use.
(cd "$here" && go test -c -vet=off -tags grpcnotrace -ldflags "$ld" -o "$out/e2e.test.tmp" k8s.io/kubernetes/test/e2e)
mv "$out/e2e.test.tmp" "$out/e2e.test"
echo ">> [1/1] e2e.test: done in $((SECONDS - t0)) s" >&2
echo ">> e2e.test ready: $("$out/e2e.test" --version)" >&2
echo "$out/e2e.test"
