#!/usr/bin/env bash
# Build helm from the Go module proxy into a version-keyed cache directory outside the repo, the
# way hack/controlplane/build.sh builds the control plane (same cache root, same Go settings).
# Prints the path of the helm binary on its last line. Skips the build when it is already there.
set -euo pipefail
HELM_VERSION=v3.22.0

command -v go >/dev/null || { echo "error: 'go' is not installed; helm is built from source with Go" >&2; exit 1; }
go_version=$(go env GOVERSION)
cache_root=${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}
out="$cache_root/helm-$HELM_VERSION-$go_version"
if [ -x "$out/helm" ]; then echo "$out/helm"; exit 0; fi

export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$out.partial"
# What helm's own Makefile (LDFLAGS) sets and `go install` leaves at its defaults: the version
# `helm version` reports, and the Kubernetes version `helm template` and `helm lint` assume when no
# cluster is asked (else v1.20, which a chart's kubeVersion constraint refuses). That is the
# minor of the client-go helm is built with, as 1.<minor>, per the Makefile's arithmetic.
# https://github.com/helm/helm/blob/main/Makefile
src=$(cd / && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
client_go=$(awk '$1 == "k8s.io/client-go" {print $2}' "$src/go.mod")
k8s_minor=$(echo "$client_go" | cut -d. -f2)
ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ld+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
t0=$SECONDS
echo ">> building helm $HELM_VERSION into $out" >&2
echo ">> [1/1] helm: go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION (module downloads, then a compile; later runs reuse it) ..." >&2
(cd / && GOBIN="$out.partial" go install -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
echo ">> [1/1] helm: done in $((SECONDS - t0)) s" >&2
rm -rf "$out"
mv "$out.partial" "$out"
echo ">> helm ready: $("$out/helm" version --short)" >&2
echo "$out/helm"
