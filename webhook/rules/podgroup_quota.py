"""Validating PodGroups: PodGroupMinResources. The summed minResources of a namespace's
PodGroups never exceed its ResourceQuotas.

Each decision is made on the namespace's ledger (in priogate's own namespace, where
tenants cannot write) and recorded with a resourceVersion precondition, so concurrent admissions
on any number of replicas and workers are serialized by the API server: a decision made on a
copy that is no longer current fails with 409 and is made again on a GET, and exactly as many
groups are admitted as fit. A decision counts the cached quotas and the quota
changes the ledger holds as fences (priogate.ledger.fences, written by webhook.rules.quota_fence
before kube-apiserver stores a change), so a quota created or lowered before the request
arrived limits it without a read of the quotas. Dry-run requests decide but write nothing.

A reservation ends when its PodGroup is really gone, never at DELETE admission: kube-apiserver
does not send PodGroup DELETEs here at all (a group held by a finalizer, or in a foreground
deletion, is still stored, and a DELETE admitted here may still fail). An entry whose group a
quorum LIST does not hold is dropped by the next admission it would block, or by the
controller's sweep. A shrinking UPDATE lowers nothing at admission (a later admission step may
refuse it); the stored object does, through the same LIST.

A negative minResources amount is refused: it would lower the namespace's summed reservations
and let a later group claim more than the quota (the CRD's pattern refuses it too, but Volcano's
own CRD, which clusters with Volcano keep, allows a sign). An update that claims nothing more
than before is never refused, so finalizer removal and annotation writes always go through.

Called in enrolled namespaces only (priogate.scope); webhook.rules.podgroup_enrolment decides
the first claim in any other namespace with this module's handler, after enrolling it. A dry-run
coverage probe is refused here with priogate.scope.COVERED.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import structlog

from priogate import podgroup
from priogate.ledger import claim
from priogate.ledger.claim import Claim
from priogate.ledger.model import Entry, normalize, stamp
from priogate.ledger.outcome import Outcome
from priogate.ledger.totals import TotalsByNamespace
from priogate.quota import check_podgroup, min_resources_problem
from priogate.resources import parse_quantity
from priogate.scope import COVERED, ENROLLED_LABEL, ENROLLED_VALUE, is_probe
from webhook.awaiting import decide_waiting
from webhook.ledger_refusal import ledger_refusal
from webhook.objects import (
    MalformedObject,
    mapping,
    new_object,
    object_name,
    old_object,
    optional_int,
    optional_str,
)
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny

log = structlog.get_logger("priogate.podgroup_quota")


def _entry(obj: Mapping[str, Any], where: str, now: dt.datetime) -> Entry:
    meta = mapping(obj, "metadata", where)
    spec = mapping(obj, "spec", where)
    name = object_name(obj, where)
    min_member = optional_int(spec, "minMember", f"{where}.spec")
    if min_member is None:
        min_member = podgroup.DEFAULT_MIN_MEMBER
    if min_member < 0:
        raise MalformedObject(f"{where}.spec.minMember must be 0 or more, not {min_member}")
    try:
        min_resources = normalize(mapping(spec, "minResources", f"{where}.spec"))
    except ValueError as e:
        raise MalformedObject(f"{where}.spec.minResources: {e}") from None
    return Entry(
        group=name,
        uid=optional_str(meta, "uid", f"{where}.metadata") or "",
        min_resources=min_resources,
        min_member=min_member,
        priority_class=optional_str(spec, "priorityClassName", f"{where}.spec") or "",
        admitted_at=stamp(now),
        generation=max(0, optional_int(meta, "generation", f"{where}.metadata") or 0),
    )


def _negative(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
    """The field error for the first negative amount this request sets, in upstream's words
    (apimachinery's IsNegativeErrorMsg, as ValidateNonnegativeQuantity in
    pkg/apis/core/validation reports a negative ResourceQuota or container request). An amount
    that an UPDATE leaves as it was stored is not refused again: a group stored before this
    check must stay deletable and annotatable."""
    amounts = mapping(mapping(obj, "spec", "object"), "minResources", "object.spec")
    before = mapping(mapping(old, "spec", "oldObject"), "minResources", "oldObject.spec") if old else {}
    for name, value in sorted(amounts.items()):
        # Both objects went through _entry, so every amount parses.
        amount = parse_quantity(value)
        if amount < 0 and (name not in before or parse_quantity(before[name]) != amount):
            return (
                f"spec.minResources.{name}: Invalid value: {json.dumps(value)}: must be greater than "
                "or equal to 0 (a negative amount would lower the namespace's summed reservations)"
            )
    return None


# The running sums of each namespace's ledger in this process (its turns are taken one at a
# time).
_TOTALS = TotalsByNamespace()


def _refused_by_stored_groups(request: AdmissionRequest, view: ClusterView, claim: Entry) -> str | None:
    """The refusal a turn would end in whatever the ledger holds: the groups the watch cache
    shows stored already leave the claim no room. A turn refuses exactly then once the ledger's
    admissions in flight are settled (settlement.once_settled: the ledger becomes the stored
    groups), and a refusal rests on the caches anyway, so such a claim takes no turn and no read
    of the ledger. A claim that fits these groups is decided in its turn as before."""
    namespace = request.namespace
    others = view.stored_groups(namespace).others(claim.key)
    return check_podgroup(view.resource_quotas(namespace), others, claim.reservation())


def _parsed(request: AdmissionRequest, now: dt.datetime) -> tuple[Entry, Entry | None]:
    """The claims of the object and, for an UPDATE, of the old object (MalformedObject when one
    does not parse)."""
    entry = _entry(new_object(request), "object", now)
    previous = _entry(old_object(request), "oldObject", now) if request.operation == "UPDATE" else None
    return entry, previous


def _misnamed(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
    """The field error for resource names this request sets that are not one (or name one
    resource twice with two amounts): priogate.quota.min_resources_problem. An UPDATE that
    leaves minResources as stored is not refused again, as in _negative."""
    amounts = mapping(mapping(obj, "spec", "object"), "minResources", "object.spec")
    if old is not None and amounts == mapping(
        mapping(old, "spec", "oldObject"), "minResources", "oldObject.spec"
    ):
        return None
    return min_resources_problem(amounts)


def _invalid(request: AdmissionRequest, entry: Entry, previous: Entry | None) -> Decision | None:
    old = request.old_object if previous else None
    problem = _negative(new_object(request), old) or _misnamed(new_object(request), old)
    if problem:
        return deny(f'PodGroup.scheduling.volcano.sh "{entry.group}" is invalid: {problem}', code=422)
    return None


def refused_as_invalid(request: AdmissionRequest) -> Decision | None:
    """The refusal of a CREATE or UPDATE whose object no ledger is consulted for: a negative
    amount (a malformed object raises MalformedObject)."""
    return _invalid(request, *_parsed(request, dt.datetime.now(dt.UTC)))


def _before_turn(request: AdmissionRequest, view: ClusterView) -> Decision | tuple[Entry, Entry | None]:
    """The decision that needs no turn on the ledger, or the claims the turn decides on (those
    of the object and of the old object)."""
    if request.operation not in ("CREATE", "UPDATE"):
        # DELETE is not registered (a reservation ends when the group is gone, confirmed by a
        # quorum LIST); a DELETE posted here anyway changes nothing.
        return allow()
    entry, previous = _parsed(request, dt.datetime.now(dt.UTC))
    if is_probe(entry.group, request.dry_run):
        # kube-apiserver routed the probe here: it sees the namespace's enrolment label
        # (webhook.rules.podgroup_enrolment). Always refused, so never stored.
        return deny(COVERED)
    invalid = _invalid(request, entry, previous)
    if invalid is not None:
        return invalid
    if previous is not None and previous.covers(entry):
        # Claims nothing more than the stored object did: never refused (refusing would free
        # nothing, even if the quota was lowered since), and a ledger that cannot be written
        # does not refuse it either (admit): the ledger then keeps the larger, older amount,
        # which over-reserves and never under-reserves.
        if mapping(new_object(request), "metadata", "object").get("deletionTimestamp"):
            # A terminating group's updates (finalizer removal) claim nothing new: its entry
            # keeps reserving until the group is gone, and no ledger write may hold up its way
            # out.
            return allow()
    else:
        blocked = _refused_by_stored_groups(request, view, entry)
        if blocked is not None:
            return deny(blocked)
    return entry, previous


def before_turn(request: AdmissionRequest, view: ClusterView) -> Decision | None:
    """RuleSet.before_turn: what admit decides without a turn on the ledger, else None."""
    decided = _before_turn(request, view)
    return decided if isinstance(decided, Decision) else None


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    decided = _before_turn(request, view)
    if isinstance(decided, Decision):
        return decided
    entry, previous = decided
    shrinking = previous is not None and previous.covers(entry)
    try:
        problem = decide_waiting(
            lambda: _turn(request, view, entry, previous),
            request.deadline,
            "PodGroup admission(s)",
            generation=lambda: view.podgroups_generation(request.namespace),
            # As before the first turn: a shrink is never refused.
            refusal=None if shrinking else lambda: _refused_by_stored_groups(request, view, entry),
        )
    except Exception as e:
        if shrinking:
            log.warning(
                "ledger not updated; an update claiming no more is allowed anyway",
                podgroup=request.name,
                error=repr(e),
            )
            return allow()
        log.warning("ledger unavailable", namespace=request.namespace, error=str(e))
        refusal = ledger_refusal("PodGroup quota", e)
        if refusal is None:
            raise
        return refusal
    return deny(problem) if problem else allow()


def _turn(request: AdmissionRequest, view: ClusterView, entry: Entry, previous: Entry | None) -> Outcome:
    """One turn on the namespace's ledger (priogate.ledger.claim), on what the caches show now."""
    namespace = request.namespace
    asked_at = _now()
    ask = Claim(
        namespace=namespace,
        entry=entry,
        previous=previous,
        live=view.live_podgroups(namespace),
        stored=view.stored_podgroups(namespace),
        quotas=view.resource_quotas(namespace),
        bound=view.in_flight,
        totals=_TOTALS(namespace),
        asked_at=asked_at,
    )
    return view.ledger_store.update(
        namespace,
        lambda ledger, reads: claim.decide(ledger, reads, _now, ask),
        dry_run=request.dry_run,
        deadline=request.deadline,
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


RULE_SET = RuleSet(
    name="podgroup-quota.priogate.io",
    path="/validate/podgroups",
    kind="validating",
    handler=admit,
    api_groups=("scheduling.volcano.sh",),
    api_versions=("v1beta1",),
    resources=("podgroups",),
    operations=("CREATE", "UPDATE"),
    side_effects="NoneOnDryRun",
    timeout_seconds=10,
    needs=("resourcequotas", "podgroups"),
    # Enrolled namespaces only; a namespace's first claim goes through
    # webhook.rules.podgroup_enrolment, which enrols it before deciding the claim the same way.
    namespace_labels=((ENROLLED_LABEL, "In", (ENROLLED_VALUE,)),),
    server="quota",
    ledger_turn=True,
    before_turn=before_turn,
)
