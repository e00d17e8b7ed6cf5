"""Validating PodGroups in namespaces priogate has not enrolled: enrol the namespace, prove that
kube-apiserver routes it to the quota hooks, then decide the reservation as the PodGroup quota
hook does.

The pod quota hook is called only in enrolled namespaces (its namespaceSelector requires
priogate.scope.ENROLLED_LABEL), so pod creates where nothing was ever reserved cost no webhook
round trip. This hook keeps the guarantee that made the pod quota hook universal: a pod created
after a namespace's first reservation is admitted is checked against it. Its selector is the
complement of the reservation hook's (the label NotIn ["true"] matches a namespace without it),
and its matchConditions skip PodGroups that reserve nothing, so the only PodGroups it sees are
the first claims in a namespace. For each (not dry-run) it:

1. merge-patches the label onto the namespace (idempotent; retried on 409 and the API server's
   transient errors);
2. proves the routing with a dry-run probe (priogate.scope): kube-apiserver matches selectors
   against its namespace informer, which lags the write, so it re-probes until the reservation
   hook answers the probe (the pod quota hook has the same selector and the same informer), or
   refuses the PodGroup with 429 and "retry" when that is not proven within PROBE_SECONDS (the
   label stays, so the retry finds the namespace enrolled);
3. decides the claim with the reservation hook's own handler (webhook.rules.podgroup_quota).

A dry-run PodGroup is decided the same way without steps 1 and 2: it writes nothing, and an
unenrolled namespace holds nothing to enrol for.

Why a PodGroup probe and not a pod one: kube-apiserver authorizes a dry-run request as the real
one (dryRun changes nothing in RBAC), so a pod probe would need `create pods` in every
namespace, which runs code on nodes; `create podgroups` grants nothing beyond what this hook's
own answers already decide (which groups exist and what they reserve), and the probe is always
refused. Why the hooks split instead of one hook that reads the label: kube-apiserver's own
routing decision is the proof, with no namespace cache in priogate that could disagree with
kube-apiserver's.

The label is never removed. Removing it when the last reservation ends would race a concurrent
first reservation admitted on another kube-apiserver whose informer still shows the label (its
PodGroup goes to the reservation hook, not here, and nothing re-labels); keeping it costs only
the pod quota hook's cached no-reservation answer in namespaces that once had reservations.
A label that goes missing from a namespace holding reservations (removed by an admin, or never
set before an upgrade) is put back by the controller (controller/enrol.py); that backstop is
not the guarantee, this hook is.

With several kube-apiserver replicas, the probe proves the routing of the replica that answers
it (through the webhook's Service IP, not necessarily the replica that sent this PodGroup); the
others see the label within their informer's watch latency.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from priogate.kube.client import ApiError
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE, NOT_COVERED, is_probe, probe_verdict
from webhook.objects import mapping, new_object, optional_str
from webhook.registry import SERVERS, ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny
from webhook.rules import podgroup_quota

NAME = "podgroup-enrolment.priogate.io"
# How long a first reservation waits for kube-apiserver's namespace informer (its watch
# latency: milliseconds when healthy). Well inside the hook's timeout, leaving the reservation
# decision its share.
PROBE_SECONDS = 3.0
DECISION_SECONDS = 5.0
DEFAULT_TIMEOUT = 10.0
# A probe is answered by the quota server itself, so a thread waiting for its probe needs
# another thread free: with every thread of a worker enrolling, probes could only queue until
# they time out. At most this many threads per worker enrol at once (half the quota server's
# default threads, webhook.registry.SERVERS); a first claim beyond them is refused with
# "retry" at once. Enrolment is once per namespace, so this bounds only a burst of first claims.
ENROLLING_AT_ONCE = max(1, SERVERS["quota"] // 2)
_enrolling = threading.BoundedSemaphore(ENROLLING_AT_ONCE)


def request_name(request: AdmissionRequest) -> str:
    if request.name:
        return request.name
    meta = mapping(new_object(request), "metadata", "object")
    return optional_str(meta, "name", "object.metadata") or ""


def prove_coverage(
    view: ClusterView,
    namespace: str,
    until: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, str]:
    """Probe until kube-apiserver routes the namespace to the reservation hook, or `until`:
    whether it does, and what the last probe met (for the refusal when it never did)."""
    pause = 0.02
    while True:
        try:
            refusal = view.probe_refusal(namespace)
            seen = "admitted, by no quota hook" if refusal is None else refusal
        except (ApiError, OSError) as e:
            refusal, seen = None, str(e)  # the API server's trouble: probe again
        verdict = probe_verdict(refusal, podgroup_quota.RULE_SET.name, NAME)
        if verdict:
            return True, seen
        if clock() + pause >= until:
            return False, seen
        sleep(pause)
        pause = min(pause * 2, 0.25)


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation not in ("CREATE", "UPDATE"):
        return allow()
    if is_probe(request_name(request), request.dry_run):
        return deny(NOT_COVERED)
    terminating = request.operation == "UPDATE" and mapping(new_object(request), "metadata", "object").get(
        "deletionTimestamp"
    )
    if request.dry_run or terminating:
        # Writes nothing (dry run), or claims nothing new (a terminating group's finalizer
        # removal, which no ledger write may hold up): no enrolment.
        return podgroup_quota.admit(request, view)
    invalid = podgroup_quota.refused_as_invalid(request)
    if invalid is not None:
        return invalid  # refused whatever the ledger says: nothing to enrol for
    if not _enrolling.acquire(blocking=False):
        return deny(
            f"PodGroup quota: namespace {request.namespace} is being enrolled for reservations and"
            f" {ENROLLING_AT_ONCE} first claims are being enrolled already; retry",
            code=429,
            reason="TooManyRequests",
        )
    try:
        now = time.monotonic()
        deadline = request.deadline if request.deadline is not None else now + DEFAULT_TIMEOUT
        until = min(now + PROBE_SECONDS, deadline - DECISION_SECONDS)
        try:
            routed = view.enroll(request.namespace, until)
        except (ApiError, OSError) as e:
            return deny(
                f"PodGroup quota: namespace {request.namespace} could not be enrolled for reservations"
                f" ({e}); retry",
                code=503,
                reason="ServiceUnavailable",
            )
        proven, seen = prove_coverage(view, request.namespace, until) if routed else (True, "")
    finally:
        _enrolling.release()
    if not proven:
        # A probe that meets another answer than the enrolment hook's (a webhook that does not
        # support dry run, say) never proves anything: say what it met.
        return deny(
            f"PodGroup quota: namespace {request.namespace} is being enrolled for reservations;"
            f" kube-apiserver does not route its pods to the pod quota hook yet, retry (last probe: {seen})",
            code=429,
            reason="TooManyRequests",
        )
    return podgroup_quota.admit(request, view)


RULE_SET = RuleSet(
    name=NAME,
    path="/validate/podgroups-enrolment",
    kind="validating",
    handler=admit,
    api_groups=("scheduling.volcano.sh",),
    api_versions=("v1beta1",),
    resources=("podgroups",),
    operations=("CREATE", "UPDATE"),
    side_effects="NoneOnDryRun",
    timeout_seconds=10,
    needs=("resourcequotas", "podgroups"),
    namespace_labels=((ENROLLED_LABEL, "NotIn", (ENROLLED_VALUE,)),),
    # A PodGroup that claims nothing (minMember 0 and no minResources) needs no enrolment and
    # no quota can refuse it. Every other one claims at least its minMember pods, which a
    # quota on pods, or one scoped to its PriorityClass, limits whatever its minResources
    # (Volcano's webhook defaults minMember to 1, as the PodGroup defaults do here). The CRD's
    # structural schema prunes a null field before admission, so `has` then `size` cannot
    # fail on one.
    match_conditions=(
        (
            "claims-something",
            "!has(object.spec) || !has(object.spec.minMember) || object.spec.minMember > 0"
            " || (has(object.spec.minResources) && size(object.spec.minResources) > 0)",
        ),
    ),
    server="quota",
)
