"""Validating PodGroups: PodGroupMinResources. The summed minResources of a namespace's
PodGroups never exceed its ResourceQuotas.

Each decision is made against a fresh read of the namespace's ledger and recorded with a
resourceVersion precondition, so concurrent admissions on any number of replicas and workers
are serialized by the API server: exactly as many groups are admitted as fit. Dry-run requests
decide but write nothing.

A negative minResources amount is refused: it would lower the namespace's summed reservations
and let a later group claim more than the quota (the CRD's pattern refuses it too, but Volcano's
own CRD, which clusters with Volcano keep, allows a sign). An update that claims nothing more
than before is never refused, so finalizer removal and annotation writes always go through."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

import structlog

from priogate import podgroup
from priogate.clock import rfc3339
from priogate.kube.ledger_store import LedgerBusy
from priogate.ledger import Entry, normalize, stale_entries
from priogate.quota import check_podgroup
from priogate.resources import parse_quantity
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


def _entry(request: AdmissionRequest, obj: dict, where: str) -> Entry:
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
        admitted_at=rfc3339(dt.datetime.now(dt.UTC)),
    )


def _release(request: AdmissionRequest, view: ClusterView) -> Decision:
    meta = mapping(request.old_object or {}, "metadata", "oldObject")
    key = optional_str(meta, "uid", "oldObject.metadata") or f"name:{request.name}"

    def drop_entry(entries: dict[str, Entry]) -> tuple[dict[str, Entry] | None, None]:
        if key not in entries:
            return None, None
        return {k: e for k, e in entries.items() if k != key}, None

    try:
        view.ledger_store.update(
            request.namespace, drop_entry, dry_run=request.dry_run, deadline=request.deadline
        )
    except Exception as e:  # the delete goes ahead; the controller reclaims the entry later
        log.warning("release failed; the entry will be reclaimed", podgroup=request.name, error=repr(e))
    return allow()


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


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation == "DELETE":
        return _release(request, view)
    if request.operation not in ("CREATE", "UPDATE"):
        return allow()
    obj = new_object(request)
    if request.operation == "UPDATE" and mapping(obj, "metadata", "object").get("deletionTimestamp"):
        # Terminating: the DELETE that set deletionTimestamp released the reservation (_release),
        # so there is nothing to check and nothing to record. Recording would reserve again for
        # a group on its way out, and a failed ledger write (the namespace is terminating, or the
        # ledger is busy) must never hold up the finalizer removal that lets it go.
        return allow()
    entry = _entry(request, obj, "object")
    previous = _entry(request, old_object(request), "oldObject") if request.operation == "UPDATE" else None
    negative = _negative(obj, request.old_object if previous else None)
    if negative:
        return deny(f'PodGroup.scheduling.volcano.sh "{entry.group}" is invalid: {negative}', code=422)
    # Claims nothing more than the stored object did: never refused (see _within), and a ledger
    # that cannot be written does not refuse it either; the worst is that the ledger keeps the
    # larger, older amount, which over-reserves and never under-reserves.
    shrinking = previous is not None and _within(entry, previous)
    quotas = view.resource_quotas(request.namespace)
    live = view.live_podgroups(request.namespace)
    now = dt.datetime.now(dt.UTC)
    listed: list[dict[str, str]] = []

    def confirmed_gone(entries: dict[str, Entry]) -> set[str]:
        """Entries the cache says are orphans, pruned only when a quorum LIST agrees: a cache
        that is behind (or emptied) must never free a live group's reservation."""
        suspects = set(stale_entries(entries, live, now))
        if not suspects:
            return suspects
        if not listed:
            try:
                listed.append(view.listed_podgroups(request.namespace))
            except Exception as e:  # keep them: the controller's sweep reclaims them later
                log.warning("podgroup list failed; not pruning", namespace=request.namespace, error=repr(e))
                return set()
        return suspects & set(stale_entries(entries, listed[0], now))

    def reserve(entries: dict[str, Entry]) -> tuple[dict[str, Entry] | None, str | None]:
        existing = entries.get(entry.key)
        if existing is not None and existing.same_claim(entry):
            return None, None  # already recorded (a retry, or an update that changes no claim)
        stale = confirmed_gone(entries)
        others = [e.reservation() for k, e in entries.items() if k != entry.key and k not in stale]
        problem = None if shrinking else check_podgroup(quotas, others, entry.reservation())
        if problem:
            return None, problem
        kept = {k: e for k, e in entries.items() if k not in stale}
        if existing is not None:  # keep the original admission time
            kept[entry.key] = Entry(**{**entry.__dict__, "admitted_at": existing.admitted_at})
        else:
            kept[entry.key] = entry
        return kept, None

    try:
        problem = view.ledger_store.update(
            request.namespace, reserve, dry_run=request.dry_run, deadline=request.deadline
        )
    except Exception as e:
        if shrinking:
            log.warning(
                "ledger not updated; an update claiming no more is allowed anyway",
                podgroup=request.name,
                error=repr(e),
            )
            return allow()
        if isinstance(e, LedgerBusy):
            return deny(f"PodGroup quota ledger is busy, retry: {e}", code=429, reason="TooManyRequests")
        if isinstance(e, ValueError):  # an unreadable ledger: refuse rather than guess
            return deny(str(e), code=503, reason="ServiceUnavailable")
        raise
    if problem:
        return deny(problem)
    return allow()


def _within(new: Entry, old: Entry) -> bool:
    """An update that claims nothing more (same class, no larger amount) is never refused, even
    if the quota was lowered since: refusing would not free anything."""
    if new.priority_class != old.priority_class or new.min_member > old.min_member:
        return False
    new_demand, old_demand = new.reservation().demand, old.reservation().demand
    return all(amount <= old_demand.get(name, 0) for name, amount in new_demand.items())


RULE_SET = RuleSet(
    name="podgroup-quota.priogate.io",
    path="/validate/podgroups",
    kind="validating",
    handler=admit,
    api_groups=("scheduling.volcano.sh",),
    api_versions=("v1beta1",),
    resources=("podgroups",),
    operations=("CREATE", "UPDATE", "DELETE"),
    side_effects="NoneOnDryRun",
    timeout_seconds=10,
    needs=("resourcequotas", "podgroups"),
    server="quota",
)
