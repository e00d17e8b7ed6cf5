"""The pod charge turn: whether a pod fits its namespace's quotas beside what the PodGroups of
others still reserve and what pods admitted a moment ago use, and the ledger with its charge.

With hard H, usage U (the quota's status.used, plus the charges of pods admitted a moment ago that
it may not show yet) and the unconsumed reservations R of the groups other than the pod's own, a
pod is refused when U + request + R > H. A member of a group draws on its own group's reservation
first, because its own group is left out of R. kube-apiserver's ResourceQuota plugin charges a pod
to status.used only after the webhooks have answered (plugin/pkg/admission/resourcequota
controller.go), so pods admitted in a burst would all read the same `used`: the ledger's charges
close that gap until status.used holds them.

Pure: the ledger, the turn's quorum reads and the clock come in; the ledger to write and the
outcome go out (docs/ledger.md has the invariant this keeps).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from priogate.clock import parse_time
from priogate.ledger.fences import unexpired
from priogate.ledger.model import Charge, Entry, Ledger, Reads, stamp
from priogate.ledger.outcome import Awaiting, Clock, Outcome
from priogate.ledger.settlement import (
    adopted,
    awaiting,
    in_flight,
    live_charges,
    once_settled,
    resync,
    unconfirmed,
)
from priogate.quota import Consumer, Reservation, check_pod, unconsumed
from priogate.resources import ResourceList, add


@dataclass(frozen=True)
class PodCharge:
    """One pod admission, with what the caches showed when its turn was asked for."""

    key: str  # the admission request's uid: the charge's key in the ledger
    consumer: Consumer
    demand: ResourceList  # quota-named amounts the pod adds (for a resize: what it grows by)
    charge: Charge  # the charge to record, stamped when decided
    consumed_by_group: Mapping[str, ResourceList]  # group name -> what its cached members use
    member_uids: Mapping[str, bool]  # uids of the cached (stored) member pods
    live: Mapping[str, bool]  # uids of the cached stored groups (-> being deleted)
    stored: Mapping[str, Entry]  # the cached stored groups' claims, by uid
    # The claims of the cached live groups as the cached view holds them (the cached ledger's
    # entry where it has one): adopted where the ledger read lacks them.
    cached_claims: list[Entry]
    quotas: list[Mapping[str, Any]]  # the cached ResourceQuotas
    bound: dt.timedelta  # the in-flight bound
    asked_at: dt.datetime  # when the caches above were read (priogate.ledger.claim.Claim)


def others(
    entries: Mapping[str, Entry], consumed: Mapping[str, ResourceList], own_group: str
) -> list[tuple[Reservation, ResourceList]]:
    """Each other group's reservation with what of it its members have not used yet."""
    out = []
    for entry in entries.values():
        if entry.group == own_group:
            continue
        reservation = entry.reservation()
        left = unconsumed(reservation, consumed.get(entry.group, {}))
        if left:
            out.append((reservation, left))
    return out


def decide(ledger: Ledger, reads: Reads, clock: Clock, ask: PodCharge) -> tuple[Ledger | None, Outcome]:
    """One turn: the ledger to write (None: nothing to write) and None (admitted, charged), a
    refusal, or Awaiting."""
    now = ask.asked_at
    bound = ask.bound
    charges = live_charges(ledger.charges, now, ask.member_uids, bound)
    entries = adopted(ledger.entries, ask.cached_claims)
    quotas = _stored_quotas(reads, ask.quotas, ledger, now)

    def check(entries: Mapping[str, Entry], charges: Mapping[str, Charge]) -> str | None:
        consumed = dict(ask.consumed_by_group)
        charged: dict[str, Fraction] = {}
        for c in charges.values():
            charged = add(charged, c.amounts())
            if c.group:
                consumed[c.group] = add(consumed.get(c.group, {}), c.amounts())
        own = ask.charge.group
        return check_pod(quotas, ask.consumer, ask.demand, others(entries, consumed, own), charged)

    problem: Outcome = check(entries, charges)
    resynced = None
    if problem:
        # As for PodGroups: entries whose groups may be gone are confirmed before refusing.
        candidates = set(unconfirmed(entries, ask.live, now, bound, ask.stored))
        without = {k: e for k, e in entries.items() if k not in candidates}
        if candidates and check(without, charges) is None:
            resynced = resync(ledger.entries, reads.podgroups(), bound)
            problem = check(resynced, charges)
    if isinstance(problem, str):
        # Fits only if admissions still in flight are never stored: the charges of pods not yet
        # seen stored (each counts until its bound), and PodGroup claims a quorum LIST does not
        # confirm yet. A LIST begun after a claim's bound has passed ends it instead.
        ends = {key: parse_time(c.charged_at) + bound for key, c in charges.items()}
        settled = resynced if resynced is not None else entries
        if any(in_flight(e, clock(), bound) for e in settled.values()):
            listing = reads.podgroups()
            resynced = resync(ledger.entries, listing, bound)
            problem = check(resynced, charges)
            pending = awaiting(resynced, listing, bound)
            ends.update(pending)
            settled = once_settled(resynced, listing) if pending else resynced
        if problem and ends and check(settled, {}) is None:
            problem = Awaiting(problem, len(ends), max(ends.values()))
    kept = ledger.with_entries(resynced) if resynced is not None else ledger
    if problem:
        changed = dict(kept.entries) != dict(ledger.entries) or charges != dict(ledger.charges)
        return (kept.with_charges(charges) if changed else None), problem
    # Stamped when decided (see priogate.ledger.claim).
    decided = replace(ask.charge, charged_at=stamp(clock()))
    return kept.with_charges({**charges, ask.key: decided}), None


def _stored_quotas(
    reads: Reads, cached: list[Mapping[str, Any]], ledger: Ledger, now: dt.datetime
) -> list[Mapping[str, Any]]:
    """The namespace's quotas as stored now, status.used with them: a quorum GET of each quota
    that the cache or the ledger's fences name, made after the ledger was read. A quorum LIST
    would also find a quota neither names, but none can exist (every quota created in a
    namespace with priogate's hooks was fenced into the ledger before it was stored, and is
    cached long before its fence expires), and a LIST of a kind that hears few events waits up
    to 100 ms for kube-apiserver's cache (KEP-2340) where a GET takes a few milliseconds."""
    names = {str((q.get("metadata") or {}).get("name") or "") for q in cached}
    names |= {fence.quota for fence in unexpired(ledger.fences, now).values()}
    stored = (reads.quota(name) for name in sorted(names) if name)
    return [quota for quota in stored if quota is not None]
