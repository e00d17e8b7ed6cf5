#!/usr/bin/env bash
# The static policy check of the pods priogate ships (`make lint`): kube-score over what an admin
# installs, rendered three ways, each scored on its own (kube-score merges objects of the same
# kind and name, so the renders must not share a run):
#   1. the kustomize base, `kubectl kustomize manifests/` (what `kubectl apply -k` applies);
#   2. the chart with its default values (mode: Priority plugin kept, no mTLS);
#   3. the chart in the other mode with mTLS and the monitoring objects on, the values that
#      change the pods (a client-CA volume) or add objects (a Service for the ServiceMonitor).
# Fails on any CRITICAL finding. A finding that is wrong for priogate is not silenced here but
# on its object, with kube-score's `kube-score/ignore: <test>` annotation and a comment saying
# why (manifests/, and hack/chart.py for the one that depends on a value).
set -euo pipefail
cd "$(dirname "$0")/../.."

kube_score=$(bash hack/kube-score/build.sh)
helm=$(bash hack/helm/build.sh)

# The flags, and why:
# -o ci: one line per object and test, "[GRADE] name/namespace kind: (container) finding",
#   which reads well in a CI log and greps; the [OK] and [SKIPPED] lines are dropped below.
# --kubernetes-version: the control plane the e2e tests install into (hack/controlplane/build.sh),
#   so stable-version judges apiVersions against the newest release priogate runs on.
# --ignore-container-cpu-limit: no container has a CPU limit, on purpose. The webhook answers
#   kube-apiserver within its hooks' timeoutSeconds (5 s or less) and CFS quota throttling
#   under a burst would add to every admission's latency; the requests give each container its
#   share under contention, and the memory and ephemeral-storage limits stay.
# --enable-optional-test container-seccomp-profile, container-ports-check: both hold today
#   (RuntimeDefault on every pod; unique, short port names) and must keep holding.
# Not enabled: the optional requests-equal-limits tests (Guaranteed QoS would need a CPU limit,
#   and the memory limits sit above the requests on purpose: the quota server's and the
#   controller's caches grow with the cluster). Warnings are printed but do not fail: the one
#   left, on every pod, is that egress is not restricted. Each pod's only connections go to
#   kube-apiserver, whose address only the admin knows (docs/hardening.md), as for the
#   webhook's ingress sources.
flags=(
  score --output-format ci --color never
  --kubernetes-version "v$(sed -n 's/^K8S_VERSION=v\([0-9]*\.[0-9]*\).*/\1/p' hack/lib/k8s.sh)"
  --ignore-container-cpu-limit
  --enable-optional-test container-seccomp-profile
  --enable-optional-test container-ports-check
)

render() {
  case $1 in
    kustomize) kubectl kustomize manifests/ ;;
    chart-defaults) "$helm" template priogate charts/priogate --namespace priogate-system ;;
    chart-replaced-mtls)
      "$helm" template priogate charts/priogate --namespace priogate-system \
        --set priorityPlugin=false --set mtls.clientCASecret=apiserver-client-ca \
        --set monitoring.prometheusRule.enabled=true --set monitoring.grafanaDashboard.enabled=true \
        --set monitoring.podMonitor.enabled=true --set monitoring.serviceMonitor.enabled=true ;;
  esac
}

failed=0
for variant in kustomize chart-defaults chart-replaced-mtls; do
  rendered=$(render "$variant")
  set +e
  out=$("$kube_score" "${flags[@]}" - <<<"$rendered")
  rc=$?
  set -e
  findings=$(grep -v -e '^\[OK\]' -e '^\[SKIPPED\]' <<<"$out" || true)
  if [ "$rc" -ne 0 ]; then
    echo "kube-score: $variant: CRITICAL findings (exit $rc):" >&2
    failed=1
  else
    echo "kube-score: $variant: no critical findings ($(grep -c '^\[OK\]' <<<"$out") checks OK)"
  fi
  [ -z "$findings" ] || sed 's/^/    /' <<<"$findings"
done
exit "$failed"
