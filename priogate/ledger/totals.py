"""The summed claims of a namespace's ledger entries by priority class, kept by difference.

A PodGroup decision compares a claim with everything else the namespace reserves. Summing every
entry for each decision made a turn cost O(groups) per request: at a few hundred groups that sum
was most of the webhook's CPU per admission. A turn decides its requests one after another
against ledgers that differ by an entry or two, and a ledger read again holds the same Entry
objects (priogate.ledger.model memoizes them), so the sums are kept and moved by the entries that
changed since the last call: those a Ledger made by Ledger.updated names, else those found by
identity (a scan of every key, which a turn's first decision pays and the rest of its batch
does not). Exact: amounts in nano-units
(resources.nano_units), and quota scopes judge a reservation by its class alone, so a quota
reserves under the class totals exactly what it reserves under the entries (quota.class_totals).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from priogate.ledger.model import Entry, Ledger
from priogate.quota import Reservation, class_totals
from priogate.running_sums import Nanos, add_into


class EntryTotals:
    """Per-class sums of the entries last given, and those entries (by key, by identity)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._totals: dict[str, Nanos] = {}
        self._ledger: Ledger | None = None  # the ledger whose entries the sums are of, if one

    def others(self, entries: Ledger | Mapping[str, Entry], leave_out: str) -> list[Reservation]:
        """One Reservation per class: the summed positive claims of `entries` (a ledger's, or a
        map's) but `leave_out`'s, as quota.check_podgroup takes the others' reservations."""
        with self._lock:
            if isinstance(entries, Ledger):
                self._follow(entries)
                entries = entries.entries
            else:
                self._catch_up(entries)
                self._ledger = None
            totals = {cls: dict(amounts) for cls, amounts in self._totals.items()}
        own = entries.get(leave_out)
        if own is not None:
            add_into(totals.setdefault(own.priority_class, {}), own.positive_nanos(), -1)
        return class_totals(totals.items())

    def fork(self) -> EntryTotals:
        """A copy to sum a what-if map on (the ledger without some claims, or settled): it
        moves only the entries that differ, and these sums stay on the ledger."""
        copy = EntryTotals()
        with self._lock:
            copy._entries = dict(self._entries)
            copy._totals = {cls: dict(amounts) for cls, amounts in self._totals.items()}
            copy._ledger = self._ledger
        return copy

    def _follow(self, ledger: Ledger) -> None:
        last = self._ledger
        if last is not None and ledger.entries is last.entries:
            return
        origin = ledger.origin
        if last is not None and origin is not None and origin[0]() is last:
            # Made from the ledger these sums are of: only the keys it names differ.
            for key in origin[1]:
                before, after = self._entries.get(key), ledger.entries.get(key)
                if before is after:
                    continue
                if before is not None:
                    self._move(before, -1)
                if after is None:
                    del self._entries[key]
                else:
                    self._move(after, 1)
                    self._entries[key] = after
        else:
            self._catch_up(ledger.entries)
        self._ledger = ledger

    def _catch_up(self, entries: Mapping[str, Entry]) -> None:
        last = self._entries
        gone = last.keys() - entries.keys()
        changed = [(key, entry) for key, entry in entries.items() if last.get(key) is not entry]
        if len(gone) + len(changed) > len(entries):
            # Another namespace's ledger, or a new one: cheaper to sum afresh.
            last.clear()
            self._totals.clear()
            gone = set()
            changed = list(entries.items())
        for key in gone:
            self._move(last.pop(key), -1)
        for key, entry in changed:
            before = last.get(key)
            if before is not None:
                self._move(before, -1)
            self._move(entry, 1)
            last[key] = entry

    def _move(self, entry: Entry, sign: int) -> None:
        add_into(self._totals.setdefault(entry.priority_class, {}), entry.positive_nanos(), sign)


class TotalsByNamespace:
    """One EntryTotals per namespace; forgets them all past `kept` namespaces (each is rebuilt by
    its next decision), so namespaces that come and go cannot grow it without bound."""

    def __init__(self, kept: int = 1024) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        self._by_namespace: dict[str, EntryTotals] = {}

    def __call__(self, namespace: str) -> EntryTotals:
        with self._lock:
            totals = self._by_namespace.get(namespace)
            if totals is None:
                if len(self._by_namespace) >= self._kept:
                    self._by_namespace.clear()
                totals = self._by_namespace[namespace] = EntryTotals()
            return totals
