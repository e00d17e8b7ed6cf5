"""Validating pods: resources reserved by PodGroups cannot be used by other pods.

With hard H, usage U (the quota's status.used, plus pods admitted a moment ago that it may not
show yet) and the unconsumed reservations R of the groups other than the pod's own, a pod is
refused when U + request + R > H. A member of a group draws on its own group's reservation
first, because its own group is left out of R.

Why admissions are serialized: kube-apiserver's ResourceQuota plugin charges a pod to
status.used only after the webhooks have answered (plugin/pkg/admission/resourcequota
controller.go), so pods created in a burst would all read the same `used`. In a namespace with
live unconsumed reservations, each pod admission therefore takes a turn on the namespace's
ledger (priogate.kube.ledger_store), reads the quotas with a quorum LIST in that
turn (a quota the cache has not seen yet still limits), counts the charges of pods admitted a
moment ago, and records its own. Namespaces where nothing is reserved are answered from the
caches, with no API call. `pods/resize` is checked the same way for the increase.

kube-apiserver calls this hook only in namespaces that carry priogate's enrolment label
(priogate.scope), which is set, and its routing proven, before a namespace's first reservation
is admitted (webhook.rules.podgroup_enrolment): everywhere else nothing is reserved, and a pod
create costs no webhook round trip.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from priogate import podgroup
from priogate.ledger import charge as ledger_charge
from priogate.ledger.charge import PodCharge, others
from priogate.ledger.model import Charge, formatted
from priogate.ledger.outcome import Outcome
from priogate.quota import Consumer, quota_names
from priogate.resources import ResourceList, pod_requests, subtract
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from webhook.awaiting import decide_waiting
from webhook.ledger_refusal import ledger_refusal
from webhook.objects import (
    MalformedObject,
    check_containers,
    mapping,
    new_object,
    old_object,
    optional_str,
)
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny


def _demand(pod: Mapping[str, Any], where: str, pods: int) -> ResourceList:
    check_containers(mapping(pod, "spec", where), f"{where}.spec")
    try:
        return quota_names(pod_requests(pod), pods)
    except ValueError as e:
        raise MalformedObject(str(e)) from None


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    resize = request.operation == "UPDATE" and request.sub_resource == "resize"
    if not resize and (request.operation != "CREATE" or request.sub_resource):
        return allow()
    pod = new_object(request)
    meta = mapping(pod, "metadata", "object")
    spec = mapping(pod, "spec", "object")
    state = view.reservations(request.namespace)
    own_group = podgroup.group_of(pod)
    if not state.damaged and not others(state.entries, state.consumed_by_group, own_group):
        return allow()  # nothing reserved for others: no API call, no turn
    demand = _demand(pod, "object", 0 if resize else 1)
    if resize:
        grown = subtract(demand, _demand(old_object(request), "oldObject", 0))
        demand = {name: amount for name, amount in grown.items() if amount > 0}
    if not demand:
        return allow()
    consumer = Consumer(optional_str(spec, "priorityClassName", "object.spec") or "", pod)
    charge = Charge(
        pod=request.name or (optional_str(meta, "name", "object.metadata") or ""),
        pod_uid=optional_str(meta, "uid", "object.metadata") or "",
        group=own_group,
        demand=formatted(demand),
        charged_at="",  # stamped when decided
    )
    try:
        problem = decide_waiting(
            lambda: _turn(request, view, consumer, demand, charge), request.deadline, "admission(s)"
        )
    except Exception as e:
        refusal = ledger_refusal("pod quota", e)
        if refusal is None:
            raise
        return refusal
    return deny(problem) if problem else allow()


def _turn(
    request: AdmissionRequest, view: ClusterView, consumer: Consumer, demand: ResourceList, charge: Charge
) -> Outcome:
    """One turn on the namespace's ledger (priogate.ledger.charge), on what the caches show now."""
    asked_at = _now()
    state = view.reservations(request.namespace)
    ask = PodCharge(
        key=request.uid,
        consumer=consumer,
        demand=demand,
        charge=charge,
        consumed_by_group=state.consumed_by_group,
        member_uids=state.member_uids,
        live=state.live,
        stored=state.stored,
        cached_claims=[e for e in state.entries.values() if e.uid in state.live],
        quotas=view.resource_quotas(request.namespace),
        bound=view.in_flight,
        asked_at=asked_at,
    )
    return view.ledger_store.update(
        request.namespace,
        lambda ledger, reads: ledger_charge.decide(ledger, reads, _now, ask),
        dry_run=request.dry_run,
        deadline=request.deadline,
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


RULE_SET = RuleSet(
    name="pod-quota.priogate.io",
    path="/validate/pods",
    kind="validating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("pods",),
    operations=("CREATE",),
    # The resize subresource, for UPDATE only: every other pod update leaves requests alone.
    subresource_rules=(("pods/resize", ("UPDATE",)),),
    side_effects="NoneOnDryRun",
    needs=("resourcequotas", "ledgers", "pods", "podgroups"),
    # Only namespaces priogate enrolled before their first reservation was admitted
    # (webhook.rules.podgroup_enrolment): pod creates elsewhere cost no round trip.
    namespace_labels=((ENROLLED_LABEL, "In", (ENROLLED_VALUE,)),),
    server="quota",
    ledger_turn=True,
)
