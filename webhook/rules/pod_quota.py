"""Validating pods: resources reserved by PodGroups cannot be used by other pods.

With hard H, usage U (the quota's status.used, plus pods admitted a moment ago that it may not
show yet) and the unconsumed reservations R of the groups other than the pod's own, a pod is
refused when U + request + R > H. A member of a group draws on its own group's reservation
first, because its own group is left out of R.

Why admissions are serialized: kube-apiserver's ResourceQuota plugin charges a pod to
status.used only after the webhooks have answered (plugin/pkg/admission/resourcequota
controller.go), so pods created in a burst would all read the same `used`. In a namespace with
live unconsumed reservations, each pod admission therefore takes a turn on the namespace's
reservation record (priogate.kube.ledger_store), reads the quotas with a quorum LIST in that
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
from collections.abc import Callable, Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any

from priogate import podgroup
from priogate.clock import parse_time
from priogate.ledger import Charge, Entry, Reads, Record, formatted, stamp
from priogate.quota import Consumer, Reservation, check_pod, quota_names, unconsumed
from priogate.quota_fence import unexpired
from priogate.resources import ResourceList, add, pod_requests, subtract
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from priogate.settlement import adopted, awaiting, in_flight, live_charges, once_settled, resync, unconfirmed
from webhook.awaiting import Awaiting, decide_waiting
from webhook.objects import (
    MalformedObject,
    check_containers,
    mapping,
    new_object,
    old_object,
    optional_str,
)
from webhook.record_refusal import record_refusal
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny
from webhook.view import NamespaceReservations


def _demand(pod: Mapping[str, Any], where: str, pods: int) -> ResourceList:
    check_containers(mapping(pod, "spec", where), f"{where}.spec")
    try:
        return quota_names(pod_requests(pod), pods)
    except ValueError as e:
        raise MalformedObject(str(e)) from None


def _others(
    entries: Mapping[str, Entry], consumed: Mapping[str, ResourceList], own_group: str
) -> list[tuple[Reservation, ResourceList]]:
    out = []
    for entry in entries.values():
        if entry.group == own_group:
            continue
        reservation = entry.reservation()
        left = unconsumed(reservation, consumed.get(entry.group, {}))
        if left:
            out.append((reservation, left))
    return out


def _stored_claims(state: NamespaceReservations) -> list[Entry]:
    return [e for e in state.entries.values() if e.uid in state.live]


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    resize = request.operation == "UPDATE" and request.sub_resource == "resize"
    if not resize and (request.operation != "CREATE" or request.sub_resource):
        return allow()
    pod = new_object(request)
    meta = mapping(pod, "metadata", "object")
    spec = mapping(pod, "spec", "object")
    state = view.reservations(request.namespace)
    own_group = podgroup.group_of(pod)
    if not state.damaged and not _others(state.entries, state.consumed_by_group, own_group):
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
            lambda: _take_turn(request, view, consumer, demand, charge), request.deadline, "admission(s)"
        )
    except Exception as e:
        refusal = record_refusal("pod quota", e)
        if refusal is None:
            raise
        return refusal
    return deny(problem) if problem else allow()


def _take_turn(
    request: AdmissionRequest,
    view: ClusterView,
    consumer: Consumer,
    demand: ResourceList,
    charge: Charge,
) -> str | Awaiting | None:
    """One turn on the namespace's record: a refusal, Awaiting, or None (admitted, charged)."""
    state = view.reservations(request.namespace)
    own_group = charge.group
    now = dt.datetime.now(dt.UTC)
    bound = view.in_flight

    def decide(entries: Mapping[str, Entry], charges: Mapping[str, Charge], quotas: list) -> str | None:
        consumed = dict(state.consumed_by_group)
        charged: dict[str, Fraction] = {}
        for c in charges.values():
            charged = add(charged, c.amounts())
            if c.group:
                consumed[c.group] = add(consumed.get(c.group, {}), c.amounts())
        return check_pod(quotas, consumer, demand, _others(entries, consumed, own_group), charged)

    def take_turn(record: Record, reads: Reads) -> tuple[Record | None, str | Awaiting | None]:
        charges = live_charges(record.charges, now, state.member_uids, bound)
        entries = adopted(record.entries, _stored_claims(state))
        quotas = _stored_quotas(reads, view.resource_quotas(request.namespace), record, now)
        problem: str | Awaiting | None = decide(entries, charges, quotas)
        resynced = None
        if problem:
            # As for PodGroups: entries whose groups may be gone are confirmed before refusing.
            candidates = set(unconfirmed(entries, state.live, now, bound, state.stored))
            without = {k: e for k, e in entries.items() if k not in candidates}
            if candidates and decide(without, charges, quotas) is None:
                resynced = resync(record.entries, reads.podgroups(), bound)
                problem = decide(resynced, charges, quotas)
        if isinstance(problem, str):
            problem = (
                _awaiting(problem, resynced or entries, charges, reads, bound, decide, quotas) or problem
            )
        kept = record.with_entries(resynced) if resynced is not None else record
        if problem:
            changed = resynced is not None or charges != dict(record.charges)
            return (kept.with_charges(charges) if changed else None), problem
        # Stamped when decided (see podgroup_quota): a request that waited for its turn must not
        # look older than it is.
        decided = replace(charge, charged_at=stamp(dt.datetime.now(dt.UTC)))
        return kept.with_charges({**charges, request.uid: decided}), None

    return view.ledger_store.update(
        request.namespace, take_turn, dry_run=request.dry_run, deadline=request.deadline
    )


def _stored_quotas(
    reads: Reads, cached: list[Mapping[str, Any]], record: Record, now: dt.datetime
) -> list[Mapping[str, Any]]:
    """The namespace's quotas as stored now, status.used with them: a quorum GET of each quota
    that the cache or the record's fences name, made after the record was read. A quorum LIST
    would also find a quota neither names, but none can exist (every quota created in a
    namespace with priogate's hooks was fenced into the record before it was stored, and is
    cached long before its fence expires), and a LIST of a kind that hears few events waits up
    to 100 ms for kube-apiserver's cache (KEP-2340) where a GET takes a few milliseconds."""
    names = {str((q.get("metadata") or {}).get("name") or "") for q in cached}
    names |= {fence.quota for fence in unexpired(record.fences, now).values()}
    stored = (reads.quota(name) for name in sorted(names) if name)
    return [quota for quota in stored if quota is not None]


def _awaiting(
    problem: str,
    entries: Mapping[str, Entry],
    charges: Mapping[str, Charge],
    reads: Reads,
    bound: dt.timedelta,
    decide: Callable[[Mapping[str, Entry], Mapping[str, Charge], list], str | None],
    quotas: list,
) -> Awaiting | None:
    """Awaiting when the pod fits only if admissions still in flight are never stored: the
    charges of pods not yet seen stored (each counts until its bound), and PodGroup claims a
    quorum LIST does not confirm yet (webhook.awaiting)."""
    ends = {key: parse_time(c.charged_at) + bound for key, c in charges.items()}
    settled_entries: Mapping[str, Entry] = entries
    if any(in_flight(e, dt.datetime.now(dt.UTC), bound) for e in entries.values()):
        listing = reads.podgroups()
        pending = awaiting(entries, listing, bound)
        ends.update(pending)
        settled_entries = once_settled(entries, listing) if pending else entries
    if not ends or decide(settled_entries, {}, quotas) is not None:
        return None
    return Awaiting(problem, len(ends), max(ends.values()))


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
)
