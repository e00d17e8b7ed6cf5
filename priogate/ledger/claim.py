"""The PodGroup claim turn: whether a PodGroup's claim fits its namespace's quotas beside every
other claim the ledger holds, and the ledger with it recorded.

Pure: the ledger, the turn's quorum reads and the clock come in; the ledger to write and the
outcome go out (docs/ledger.md has the invariant this keeps).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from priogate.ledger.fences import limiting_quotas
from priogate.ledger.model import SHADOW_SUFFIX, Entry, Ledger, Listing, Reads, stamp
from priogate.ledger.outcome import Awaiting, Clock, Outcome
from priogate.ledger.settlement import (
    awaiting,
    in_flight,
    merge,
    once_settled,
    resync,
    unconfirmed,
)
from priogate.ledger.timing import UNSEEN_GRACE
from priogate.ledger.totals import EntryTotals
from priogate.quota import check_podgroup


@dataclass(frozen=True)
class Claim:
    """One PodGroup admission, with what the caches showed when its turn was asked for."""

    namespace: str
    entry: Entry  # the claim of the object
    previous: Entry | None  # the claim of the stored object, for an UPDATE
    live: Mapping[str, bool]  # uids of the cached stored groups (-> being deleted)
    stored: Mapping[str, Entry]  # the cached stored groups' claims, by uid
    quotas: list[Mapping[str, Any]]  # the cached ResourceQuotas
    bound: dt.timedelta  # the in-flight bound
    totals: EntryTotals  # running sums of this namespace's ledger entries
    # When the caches above were read: what they show is judged as of then (an entry stamped
    # after it, such as one rebuilt from a quorum LIST in this turn, is one they cannot show yet).
    asked_at: dt.datetime

    @property
    def shrinking(self) -> bool:
        """Claims nothing more than the stored object did."""
        return self.previous is not None and self.previous.covers(self.entry)


def check_claim(
    entries: Ledger | Mapping[str, Entry],
    claim: Entry,
    quotas: list[Mapping[str, Any]],
    totals: EntryTotals,
) -> str | None:
    """The claim against the other entries of a ledger or a map. `totals`: the namespace's
    running sums of its entries, or a fork of them for a what-if map, which would move those
    sums away and back."""
    return check_podgroup(quotas, totals.others(entries, claim.key), claim.reservation())


def decide(ledger: Ledger, reads: Reads, clock: Clock, ask: Claim) -> tuple[Ledger | None, Outcome]:
    """One turn: the ledger to write (None: nothing to write) and None (admitted), a refusal, or
    Awaiting."""
    now = ask.asked_at
    entry, previous = ask.entry, ask.previous
    existing = ledger.entries.get(entry.key)
    base = existing if existing is not None else previous
    # Never lowered at admission: either object may end up stored.
    claim = merge(base, entry) if base is not None else entry
    if existing is not None and existing.covers(claim) and ask.shrinking:
        return None, None  # nothing more than the stored object claims (a shrink, a metadata update)
    # Stamped when decided, not when the request arrived: a request that waited for its turn
    # must not look older than it is, or another replica could end its claim while it is still
    # on its way to storage.
    decided_at = stamp(clock())
    if existing is not None and existing.covers(claim):
        # Covered by a claim admitted earlier (a retried call, or an update covered by another
        # still in flight): nothing more is claimed, but this admission may be stored until its
        # own bound has passed, so the claim counts from now (unstamped, a LIST past the earlier
        # bound would settle it to the stored object while this one may still be stored).
        generation = max(existing.generation, entry.generation)
        restamped = replace(existing, admitted_at=decided_at, generation=generation)
        return ledger.updated({entry.key: restamped}), None
    claim = replace(claim, admitted_at=decided_at, generation=entry.generation)
    shadow: dict[str, Entry | None] = {}
    if base is not None and base.priority_class != claim.priority_class:
        # A class change: the old claim counts under the old class until the change is stored
        # or refused (the controller's sweep, or a LIST, ends it).
        key, old_claim = replace(base, admitted_at=decided_at, generation=entry.generation).as_shadow()
        shadow[key] = old_claim
    if ask.shrinking:
        return ledger.updated({**shadow, claim.key: claim}), None
    quotas = limiting_quotas(ask.namespace, ask.quotas, ledger.fences, now, ask.bound, reads.quota)
    # The ledger as judged: with the previous-class claim, not yet with this one.
    judged = ledger.updated(shadow)
    entries, problem = _judged(judged, claim, quotas, reads, now, ask)
    if problem:
        # Keep what a LIST confirmed; not the previous-class claim added for this request.
        kept = {k: e for k, e in entries.items() if not k.endswith(SHADOW_SUFFIX) or k in ledger.entries}
        return (ledger.with_entries(kept) if kept != dict(ledger.entries) else None), problem
    if entries is judged.entries:
        return judged.updated({claim.key: claim}), None
    return ledger.with_entries({**entries, claim.key: claim}), None


def _judged(
    judged: Ledger,
    claim: Entry,
    quotas: list[Mapping[str, Any]],
    reads: Reads,
    now: dt.datetime,
    ask: Claim,
) -> tuple[Mapping[str, Entry], Outcome]:
    """The entries (`judged`'s, or those less what a quorum LIST showed gone) and the claim's
    outcome among them."""
    bound = ask.bound
    entries: Mapping[str, Entry] = judged.entries

    def fits(what_if: Mapping[str, Entry]) -> bool:
        # On a fork: the ledger's running sums stay on the ledger.
        return check_claim(what_if, claim, quotas, ask.totals.fork()) is None

    problem = check_claim(judged, claim, quotas, ask.totals)
    if not problem:
        return entries, None
    # Blocked only by entries whose groups may be gone (or never stored), or lowered by now?
    # Confirm with one quorum LIST before refusing: a forged or leaked entry blocks nobody.
    candidates = set(unconfirmed(entries, ask.live, now, bound, ask.stored)) - {ask.entry.key}
    if candidates and fits({k: e for k, e in entries.items() if k not in candidates}):
        entries = resync(entries, reads.podgroups(), bound)
        problem = check_claim(entries, claim, quotas, ask.totals)
        if not problem:
            return entries, None
    own = (ask.entry.key, f"{ask.entry.uid}{SHADOW_SUFFIX}")  # this request's own claims
    if not any(in_flight(e, now, bound) for k, e in entries.items() if k not in own):
        return entries, problem
    # Blocked by admissions that may still be stored? Then it waits for their fate rather than
    # being refused for a claim that may never exist (a forged CREATE, or one a later admission
    # step refuses). The watch cache answers first: claims it shows stored are real, and those it
    # does not show yet usually are a moment later, so only a claim unseen for a while needs a
    # quorum LIST.
    seen = Listing(ask.stored, now)
    unseen = {k: t for k, t in awaiting(entries, seen, bound).items() if k not in own}
    if not unseen or not fits(once_settled(entries, seen)):
        return entries, problem  # real claims block it, or it fits not even without the unseen
    youngest = min(entries[k].admitted for k in unseen)
    if now - youngest < UNSEEN_GRACE:
        return entries, Awaiting(problem, len(unseen), youngest + UNSEEN_GRACE, through_cache=True)
    # The LIST begins after this turn's caches were read: claims whose bound has passed since
    # then are ended by it, not awaited.
    listing = reads.podgroups()
    entries = resync(entries, listing, bound)
    problem = check_claim(entries, claim, quotas, ask.totals)
    if not problem:
        return entries, None
    pending = {k: t for k, t in awaiting(entries, listing, bound).items() if k not in own}
    if pending and fits(once_settled(entries, listing)):
        return entries, Awaiting(problem, len(pending), max(pending.values()))
    return entries, problem
