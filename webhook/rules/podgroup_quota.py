"""Validating PodGroups: PodGroupMinResources. The summed minResources of a namespace's
PodGroups never exceed its ResourceQuotas.

Each decision is made on the namespace's reservation record (in priogate's own namespace, where
tenants cannot write) and recorded with a resourceVersion precondition, so concurrent admissions
on any number of replicas and workers are serialized by the API server: a decision made on a
copy that is no longer current fails with 409 and is made again on a GET, and exactly as many
groups are admitted as fit. A decision counts the cached quotas and the quota
changes the record holds as fences (priogate.quota_fence, written by webhook.rules.quota_fence
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
from dataclasses import replace
from typing import Any

import structlog

from priogate import podgroup
from priogate.entry_totals import EntryTotals, TotalsByNamespace
from priogate.ledger import SHADOW_SUFFIX, Entry, Listing, Reads, Record, normalize, stamp
from priogate.quota import check_podgroup, min_resources_problem
from priogate.quota_fence import limiting_quotas
from priogate.resources import parse_quantity
from priogate.scope import COVERED, ENROLLED_LABEL, ENROLLED_VALUE, is_probe
from priogate.settlement import admitted_time, awaiting, in_flight, merge, once_settled, resync, unconfirmed
from webhook.awaiting import Awaiting, decide_waiting
from webhook.objects import (
    MalformedObject,
    mapping,
    new_object,
    object_name,
    old_object,
    optional_int,
    optional_str,
)
from webhook.record_refusal import record_refusal
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny

log = structlog.get_logger("priogate.podgroup_quota")

# A claim admitted this recently and not yet in the watch cache is awaited through the cache
# (the next turn is taken when the cache changes), not a quorum LIST: admitted groups are
# stored and seen within milliseconds, and a LIST of every group per refusal is what the API
# server and this server would spend most on at a full quota.
UNSEEN_GRACE = dt.timedelta(seconds=1)


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


def check_claim(
    entries: Mapping[str, Entry], claim: Entry, quotas: list[Mapping[str, Any]], totals: EntryTotals
) -> str | None:
    """`totals`: the namespace's running sums of its entries (priogate.entry_totals), or a
    fork of them for a what-if map, which would move those sums away and back."""
    return check_podgroup(quotas, totals.others(entries, claim.key), claim.reservation())


# The running sums of each namespace's record in this process (its turns are taken one at a
# time), and of the stored groups its watch cache shows.
_TOTALS = TotalsByNamespace()
_STORED_TOTALS = TotalsByNamespace()


def _refused_by_stored_groups(request: AdmissionRequest, view: ClusterView, claim: Entry) -> str | None:
    """The refusal a turn would end in whatever the record holds: the groups the watch cache
    shows stored already leave the claim no room. A turn refuses exactly then once the record's
    admissions in flight are settled (settlement.once_settled: the record becomes the stored
    groups), and a refusal rests on the caches anyway, so such a claim takes no turn and no read
    of the record. A claim that fits these groups is decided in its turn as before."""
    namespace = request.namespace
    stored = view.stored_podgroups(namespace)
    return check_claim(stored, claim, view.resource_quotas(namespace), _STORED_TOTALS(namespace))


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
    """The refusal of a CREATE or UPDATE whose object no record is consulted for: a negative
    amount (a malformed object raises MalformedObject)."""
    return _invalid(request, *_parsed(request, dt.datetime.now(dt.UTC)))


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation not in ("CREATE", "UPDATE"):
        # DELETE is not registered (a reservation ends when the group is gone, confirmed by a
        # quorum LIST); a DELETE posted here anyway changes nothing.
        return allow()
    obj = new_object(request)
    entry, previous = _parsed(request, dt.datetime.now(dt.UTC))
    if is_probe(entry.group, request.dry_run):
        # kube-apiserver routed the probe here: it sees the namespace's enrolment label
        # (webhook.rules.podgroup_enrolment). Always refused, so never stored.
        return deny(COVERED)
    invalid = _invalid(request, entry, previous)
    if invalid is not None:
        return invalid
    # Claims nothing more than the stored object did: never refused (refusing would free
    # nothing, even if the quota was lowered since), and a record that cannot be written does
    # not refuse it either: the record then keeps the larger, older amount, which over-reserves
    # and never under-reserves.
    shrinking = previous is not None and previous.covers(entry)
    if shrinking and mapping(obj, "metadata", "object").get("deletionTimestamp"):
        # A terminating group's updates (finalizer removal) claim nothing new: its entry keeps
        # reserving until the group is gone, and no record write may hold up its way out.
        return allow()
    if not shrinking:
        blocked = _refused_by_stored_groups(request, view, entry)
        if blocked is not None:
            return deny(blocked)
    try:
        problem = decide_waiting(
            lambda: _decide_on_record(request, view, entry, previous, shrinking),
            request.deadline,
            "PodGroup admission(s)",
        )
    except Exception as e:
        if shrinking:
            log.warning(
                "record not updated; an update claiming no more is allowed anyway",
                podgroup=request.name,
                error=repr(e),
            )
            return allow()
        log.warning("reservation record unavailable", namespace=request.namespace, error=str(e))
        refusal = record_refusal("PodGroup quota", e)
        if refusal is None:
            raise
        return refusal
    return deny(problem) if problem else allow()


def _decide_on_record(
    request: AdmissionRequest, view: ClusterView, entry: Entry, previous: Entry | None, shrinking: bool
) -> str | Awaiting | None:
    """One turn on the namespace's record: a refusal, Awaiting, or None (admitted, recorded)."""
    now = dt.datetime.now(dt.UTC)
    namespace = request.namespace
    generation = view.podgroups_generation(namespace)  # taken before what the cache shows
    live = view.live_podgroups(namespace)
    stored = view.stored_podgroups(namespace)
    bound = view.in_flight
    totals = _TOTALS(namespace)

    def reserve(record: Record, reads: Reads) -> tuple[Record | None, str | Awaiting | None]:
        # Stamped when decided, not when the request arrived: a request that waited for its
        # turn must not look older than it is, or another replica could end its claim while it
        # is still on its way to storage.
        decided_at = stamp(dt.datetime.now(dt.UTC))
        entries = dict(record.entries)
        existing = entries.get(entry.key)
        base = existing if existing is not None else previous
        # Never lowered at admission: either object may end up stored.
        claim = merge(base, entry) if base is not None else entry
        if existing is not None and existing.covers(claim):
            return None, None  # nothing more claimed (a retry, a shrink, a metadata update)
        claim = replace(claim, admitted_at=decided_at, generation=entry.generation)
        if base is not None and base.priority_class != claim.priority_class:
            # A class change: the old claim counts under the old class until the change is
            # stored or refused (the controller's sweep, or a LIST, ends it).
            key, old_claim = replace(base, admitted_at=decided_at, generation=entry.generation).as_shadow()
            entries[key] = old_claim
        if shrinking:
            entries[claim.key] = claim
            return record.with_entries(entries), None

        def decide(quotas: list[Mapping[str, Any]]) -> str | Awaiting | None:
            nonlocal entries

            def fits(what_if: Mapping[str, Entry]) -> bool:
                # On a fork: the record's running sums stay on the record.
                return check_claim(what_if, claim, quotas, totals.fork()) is None

            problem = check_claim(entries, claim, quotas, totals)
            if problem:
                # Blocked only by entries whose groups may be gone (or never stored), or lowered
                # by now? Confirm with one quorum LIST before refusing: a forged or leaked entry
                # then blocks nobody.
                candidates = set(unconfirmed(entries, live, now, bound, stored)) - {entry.key}
                without = {k: e for k, e in entries.items() if k not in candidates}
                if candidates and fits(without):
                    entries = resync(entries, reads.podgroups(), bound)
                    problem = check_claim(entries, claim, quotas, totals)
            own = (entry.key, f"{entry.uid}{SHADOW_SUFFIX}")  # this request's own claims
            if problem and any(in_flight(e, now, bound) for k, e in entries.items() if k not in own):
                # Blocked by admissions that may still be stored? Then this one waits for their
                # fate rather than being refused for a claim that may never exist (a forged
                # CREATE, or one a later admission step refuses). The watch cache answers first:
                # claims it shows stored are real, and those it does not show yet usually are
                # a moment later, so only a claim unseen for a while needs a quorum LIST.
                seen = Listing(stored, now)
                unseen = {k: t for k, t in awaiting(entries, seen, bound).items() if k not in own}
                if not unseen or not fits(once_settled(entries, seen)):
                    return problem  # real claims block it, or it fits not even without the unseen
                youngest = min(admitted_time(entries[k]) for k in unseen)
                if now - youngest < UNSEEN_GRACE:
                    changed = lambda: view.podgroups_generation(namespace) != generation  # noqa: E731
                    return Awaiting(problem, len(unseen), youngest + UNSEEN_GRACE, changed)
                listing = reads.podgroups()
                pending = awaiting(entries, listing, bound)
                for key in own:
                    pending.pop(key, None)
                if pending and fits(once_settled(entries, listing)):
                    return Awaiting(problem, len(pending), max(pending.values()))
            return problem

        cached = view.resource_quotas(namespace)
        problem = decide(limiting_quotas(namespace, cached, record.fences, now, bound, reads.quota))
        if problem:
            # Keep what a LIST confirmed; not the previous-class claim added for this request.
            kept = {k: e for k, e in entries.items() if not k.endswith(SHADOW_SUFFIX) or k in record.entries}
            changed = kept != dict(record.entries)
            return (record.with_entries(kept) if changed else None), problem
        entries[claim.key] = claim
        return record.with_entries(entries), None

    return view.ledger_store.update(
        request.namespace, reserve, dry_run=request.dry_run, deadline=request.deadline
    )


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
)
