"""Validating PodGroups: PodGroupMinResources. The summed minResources of a namespace's
PodGroups never exceed its ResourceQuotas.

Each decision is made against a fresh read of the namespace's reservation record (in priogate's
own namespace) and the quotas (a quorum LIST), and recorded with a resourceVersion
precondition, so concurrent admissions on any number of replicas and workers are serialized by
the API server: exactly as many groups are admitted as fit. Dry-run requests decide but write
nothing.

A reservation ends when its PodGroup is really gone, never at DELETE admission: kube-apiserver
does not send PodGroup DELETEs here at all (a group held by a finalizer, or in a foreground
deletion, is still stored, and a DELETE admitted here may still fail). An entry whose group a
quorum LIST no longer holds is dropped by the next admission it would block, or by the
controller's sweep. A shrinking UPDATE lowers nothing at admission (a later admission step may
refuse it); the stored spec does, through the same LIST.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import structlog

from priogate.clock import rfc3339
from priogate.kube.client import ApiError
from priogate.kube.ledger_store import LedgerBusy
from priogate.ledger import Entry, Reads, Record, entry_of_group, merge, resync, unconfirmed
from priogate.quota import check_podgroup
from webhook.objects import MalformedObject, mapping, new_object, old_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny

log = structlog.get_logger("priogate.podgroup_quota")


def _entry(obj: Mapping[str, Any], where: str, now: dt.datetime) -> Entry:
    mapping(obj, "metadata", where)
    mapping(obj, "spec", where)
    try:
        return entry_of_group(obj, rfc3339(now))
    except (ValueError, TypeError) as e:
        raise MalformedObject(f"{where}.spec.{e}" if isinstance(e, ValueError) else f"{where}: {e}") from None


def check_claim(entries: Mapping[str, Entry], claim: Entry, quotas: list[Mapping[str, Any]]) -> str | None:
    others = [e.reservation() for k, e in entries.items() if k != claim.key]
    return check_podgroup(quotas, others, claim.reservation())


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation not in ("CREATE", "UPDATE"):
        # DELETE is not registered (a reservation ends when the group is gone, confirmed by a
        # quorum LIST); a DELETE posted here anyway changes nothing.
        return allow()
    now = dt.datetime.now(dt.UTC)
    entry = _entry(new_object(request), "object", now)
    previous = _entry(old_object(request), "oldObject", now) if request.operation == "UPDATE" else None
    if previous is not None and previous.priority_class != entry.priority_class and entry.min_resources:
        return deny(
            "spec.priorityClassName of a PodGroup with minResources cannot change: its reservation "
            "is counted against the quotas of its class; delete the group and create it again"
        )
    live = view.live_podgroups(request.namespace)
    bound = view.in_flight

    def reserve(record: Record, reads: Reads) -> tuple[Record | None, str | None]:
        entries = dict(record.entries)
        existing = entries.get(entry.key)
        base = existing if existing is not None else previous
        # Never lowered at admission: either object may end up stored.
        claim = merge(base, entry) if base is not None else entry
        if existing is not None and existing.covers(claim):
            return None, None  # nothing more claimed (a retry, a shrink, a metadata update)
        claim = replace(claim, admitted_at=entry.admitted_at)
        if previous is not None and previous.covers(entry):
            # Claims nothing the stored object did not: never refused, even if the quota was
            # lowered since (refusing would free nothing). Recorded so the record covers it.
            entries[claim.key] = claim
            return record.with_entries(entries), None
        quotas = reads.quotas()
        problem = check_claim(entries, claim, quotas)
        if problem:
            # Blocked only by entries whose groups may be gone (or never stored)? Confirm with
            # one quorum LIST before refusing: a forged or leaked entry then blocks nobody.
            candidates = set(unconfirmed(entries, live, now, bound)) - {entry.key}
            without = {k: e for k, e in entries.items() if k not in candidates}
            if candidates and check_claim(without, claim, quotas) is None:
                entries = resync(entries, reads.podgroups(), bound)
                problem = check_claim(entries, claim, quotas)
        if problem:
            changed = entries != dict(record.entries)
            return (record.with_entries(entries) if changed else None), problem
        entries[claim.key] = claim
        return record.with_entries(entries), None

    try:
        problem = view.ledger_store.update(
            request.namespace, reserve, dry_run=request.dry_run, deadline=request.deadline
        )
    except LedgerBusy as e:
        return deny(f"PodGroup quota ledger is busy, retry: {e}", code=429, reason="TooManyRequests")
    except ApiError as e:
        log.warning("reservation record unavailable", namespace=request.namespace, error=str(e))
        return deny(
            f"PodGroup quota: the reservation record could not be read or written ({e}); retry",
            code=503,
            reason="ServiceUnavailable",
        )
    if problem:
        return deny(problem)
    return allow()


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
    server="quota",
)
