#!/usr/bin/env bash
# Build kube-score (the static check of the pods priogate ships, `make lint`) from the Go module
# proxy into a version-keyed cache directory outside the repo, the way hack/helm/build.sh builds
# helm (same cache root, same Go settings). Prints the path of the kube-score binary on its last
# line. Skips the build when it is already there.
set -euo pipefail
KUBE_SCORE_VERSION=v1.20.0

command -v go >/dev/null || { echo "error: 'go' is not installed; kube-score is built from source with Go" >&2; exit 1; }
go_version=$(go env GOVERSION)
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
out="$cache_root/kube-score-$KUBE_SCORE_VERSION-$go_version"
if [ -x "$out/kube-score" ]; then echo "$out/kube-score"; exit 0; fi

export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$out.partial"
# What kube-score's release build (goreleaser) sets and `go install` leaves at "development":
# the version `kube-score version` reports.
ld="-s -w -X main.version=$KUBE_SCORE_VERSION"
t0=$SECONDS
echo ">> building kube-score $KUBE_SCORE_VERSION into $out" >&2
echo ">> [1/1] kube-score: go install github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION (module downloads, then a compile; later runs reuse it) ..." >&2
(cd / && GOBIN="$out.partial" go install -ldflags "$ld" "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION")
echo ">> [1/1] kube-score: done in $((SECONDS - t0)) s" >&2
rm -rf "$out"
mv "$out.partial" "$out"
echo ">> kube-score ready: $("$out/kube-score" version)" >&2
echo "$out/kube-score"
