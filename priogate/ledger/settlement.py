"""Which entries of a ledger still count: the in-flight bound, settling an entry to
its stored PodGroup, and the ledger made true to a quorum LIST (priogate.ledger.model holds the
ledger's data; see its docstring for why the ledger is only a cache of the truth).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from priogate.clock import parse_time
from priogate.ledger.model import SHADOW_SUFFIX, Charge, Entry, Listing, formatted
from priogate.ledger.timing import IN_FLIGHT
from priogate.resources import maximum, parse_resource_list


def in_flight(entry: Entry, at: dt.datetime, bound: dt.timedelta = IN_FLIGHT) -> bool:
    """Whether the admission that last raised `entry` may still be on its way to storage at `at`."""
    return at - entry.admitted <= bound


def merge(current: Entry, new: Entry) -> Entry:
    """A claim that covers both (per resource the larger amount): what an admission ledgers while
    the request is in flight, since either object may end up stored. Of two classes, the new."""
    if current.priority_class != new.priority_class:
        return new
    larger = maximum(parse_resource_list(current.min_resources), parse_resource_list(new.min_resources))
    return replace(new, min_resources=formatted(larger), min_member=max(current.min_member, new.min_member))


def settled(entry: Entry, stored: Entry | None, at: dt.datetime, bound: dt.timedelta) -> bool:
    """Whether the admission behind `entry` can no longer change what is stored: past the
    in-flight bound, or the stored object is of its generation or later."""
    if not in_flight(entry, at, bound):
        return True
    return stored is not None and entry.generation > 0 and stored.generation >= entry.generation


def resync(
    entries: Mapping[str, Entry], listing: Listing, bound: dt.timedelta = IN_FLIGHT
) -> dict[str, Entry]:
    """The entries made true to a quorum LIST of the namespace's PodGroups:
    - an entry whose group is stored and whose admission is settled becomes the stored claim (a
      shrinking update took effect; a refused growing update is undone);
    - an entry still in flight keeps its claim, raised to the stored one if that is larger;
    - an entry whose group the LIST does not hold (gone, or never stored: uid-checked) is
      dropped once it is no longer in flight, counted until then;
    - a previous-class claim ends when its group's class change is settled;
    - a stored group without an entry (a lost or rebuilt ledger, a group stored before
      priogate) is adopted with its stored claim.
    Finalizer-held groups (deletionTimestamp set) are still stored, so they still reserve."""
    out: dict[str, Entry] = {}
    for key, entry in entries.items():
        stored = listing.groups.get(entry.uid) if entry.uid else None
        done = settled(entry, stored, listing.started, bound)
        if key.endswith(SHADOW_SUFFIX) or stored is None:
            if not done:
                out[key] = entry
            continue
        if done:
            # The entry itself where it already is the stored claim: the same object keeps the
            # sums moved by identity (priogate.ledger.totals) from summing it again.
            out[key] = (
                entry if _is_stored_claim(entry, stored) else replace(stored, admitted_at=entry.admitted_at)
            )
        else:
            out[key] = merge(stored, entry) if entry.priority_class == stored.priority_class else entry
    for uid, stored in listing.groups.items():
        if uid not in out:
            out[uid] = stored
    return out


def _is_stored_claim(entry: Entry, stored: Entry) -> bool:
    """Whether `entry` equals the stored claim given its admission stamp."""
    return (
        entry.min_resources == stored.min_resources
        and entry.min_member == stored.min_member
        and entry.priority_class == stored.priority_class
        and entry.generation == stored.generation
        and entry.group == stored.group
        and entry.uid == stored.uid
    )


def stale_entries(
    entries: Mapping[str, Entry],
    listed: Mapping[str, Any],
    now: dt.datetime,
    bound: dt.timedelta = IN_FLIGHT,
) -> list[str]:
    """Keys of entries that a LIST (`listed`: uids of the stored groups) shows no longer count:
    their group is not stored, and their admission is past the in-flight bound. What a reader
    outside priogate (kubectl priogate) reports; priogate itself drops them through resync."""
    return sorted(
        key
        for key, entry in entries.items()
        if not (entry.uid and entry.uid in listed) and not in_flight(entry, now, bound)
    )


def awaiting(entries: Mapping[str, Entry], listing: Listing, bound: dt.timedelta) -> dict[str, dt.datetime]:
    """Entries whose claim a quorum LIST (`listing`) cannot confirm or end yet, because the
    admission behind it may still be on its way to storage: a group not stored (or a
    previous-class claim), or stored with another claim by an older generation. Key -> when the
    in-flight bound passes; a LIST begun after that ends or settles it (resync)."""
    out: dict[str, dt.datetime] = {}
    for key, entry in entries.items():
        stored = listing.groups.get(entry.uid) if entry.uid else None
        if settled(entry, stored, listing.started, bound):
            continue
        if key.endswith(SHADOW_SUFFIX) or stored is None or not stored.same_claim(entry):
            out[key] = entry.admitted + bound
    return out


def once_settled(entries: Mapping[str, Entry], listing: Listing) -> dict[str, Entry]:
    """What the entries become if every admission still in flight turns out never stored or
    refused: each claim the stored one, or none. A best case, never recorded: an admission
    that fits only so must wait for those admissions' fate (`awaiting`), not assume it."""
    return resync(entries, listing, dt.timedelta(0))


def unconfirmed(
    entries: Mapping[str, Entry],
    live: Mapping[str, bool],
    now: dt.datetime,
    bound: dt.timedelta = IN_FLIGHT,
    cached: Mapping[str, Entry] | None = None,
) -> list[str]:
    """Keys of entries worth confirming with a quorum LIST before a refusal, because the LIST
    may end or lower them: past the in-flight bound and not shown alive by the watch cache
    (`live`: cached groups' uids -> being deleted); or settled by a cached stored object of
    their generation whose claim differs (`cached`: uid -> stored claim). An entry in flight
    whose group is not stored is never a candidate: its group may be stored a moment from now
    (by another replica's admission), so no LIST could end it."""
    out = []
    for key, entry in entries.items():
        stored = (cached or {}).get(entry.uid) if entry.uid else None
        if (not in_flight(entry, now, bound) and (not entry.uid or live.get(entry.uid, True))) or (
            stored is not None
            and settled(entry, stored, now, bound)
            and (key.endswith(SHADOW_SUFFIX) or not stored.same_claim(entry))
        ):
            out.append(key)
    return sorted(out)


def adopted(entries: Mapping[str, Entry], cached_groups: Iterable[Entry]) -> dict[str, Entry]:
    """Entries plus a claim for every cached (stored) group the ledger lacks: a ledger that
    misses a live group never means that group reserves nothing."""
    out = dict(entries)
    uids = {e.uid for e in entries.values()}
    for entry in cached_groups:
        if entry.uid and entry.uid not in uids:
            out[entry.uid] = entry
    return out


def live_charges(
    charges: Mapping[str, Charge],
    now: dt.datetime,
    stored_pods: Mapping[str, bool] | None = None,
    bound: dt.timedelta = IN_FLIGHT,
) -> dict[str, Charge]:
    """Charges that still count: younger than the bound, and for pods the cache does not show
    stored yet (`stored_pods`: uids of cached pods). A pod seen stored was charged in status.used
    before it was stored, and a quorum read of the quota (made in the same turn) shows that."""
    out = {}
    for key, charge in charges.items():
        if stored_pods is not None and charge.pod_uid and charge.pod_uid in stored_pods:
            continue
        try:
            at = parse_time(charge.charged_at)
        except ValueError:
            continue
        if now - at <= bound:
            out[key] = charge
    return out
