"""The stored PodGroups' claims of each namespace, their sums by priority class, and which groups
are being deleted, kept by the watch's events.

Every PodGroup admission reads its namespace's stored groups' claims: a claim those groups
already leave no room for is refused without a turn (webhook.rules.podgroup_quota), and each turn
confirms the ledger by them (priogate.ledger.claim). Rebuilding them from the cache on each change
cost O(groups) per admission under load (a change comes between any two admissions): 7 ms of a
quota server's CPU per admission at 600 groups, most of what it spent. Here an event moves one
group's claim, and the sums by it; a reader copies the namespace's map (at C speed) once per
change. Exact: the sums are in nano-units (resources.nano_units), moved by difference.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from priogate.ledger.model import Entry
from priogate.ledger.stored_groups import entry_of_group
from priogate.quota import Reservation, class_totals
from priogate.running_sums import Nanos, add_into

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class StoredGroups:
    """A namespace's stored groups as of one moment: each readable group's claim by uid, the
    positive amounts of those claims summed by priority class (nano-units), and whether each
    group, readable or not, is being deleted (by uid)."""

    claims: Mapping[str, Entry]
    sums: Mapping[str, Mapping[str, int | Fraction]]
    live: Mapping[str, bool]

    def others(self, leave_out: str) -> list[Reservation]:
        """One Reservation per class: the claims but `leave_out`'s, as quota.check_podgroup
        takes the others' reservations."""
        own = self.claims.get(leave_out)
        if own is None:
            return class_totals(self.sums.items())
        totals = {cls: dict(amounts) for cls, amounts in self.sums.items()}
        add_into(totals.setdefault(own.priority_class, {}), own.positive_nanos(), -1)
        return class_totals(totals.items())


EMPTY = StoredGroups(MappingProxyType({}), MappingProxyType({}), MappingProxyType({}))


def readable_claim(obj: Obj, admitted_at: str) -> Entry | None:
    """A stored group's claim, or None when its spec does not parse (or it has no uid): such a
    group is no claim (stored_groups.claims_by_uid)."""
    try:
        entry = entry_of_group(obj, admitted_at)
        entry.reservation()
    except (ValueError, TypeError):
        return None
    return entry if entry.uid else None


class StoredClaims:
    """Fed a PodGroup cache's events (on_event), from the moment `fill` reads what it holds."""

    def __init__(self, admitted_at: str) -> None:
        self._admitted_at = admitted_at
        self._lock = threading.Lock()
        self._claims: dict[str, dict[str, Entry]] = {}  # namespace -> uid -> claim
        self._uids: dict[str, dict[str, str]] = {}  # namespace -> group name -> uid
        self._sums: dict[str, dict[str, Nanos]] = {}  # namespace -> class -> summed nano-units
        self._live: dict[str, dict[str, bool]] = {}  # namespace -> uid -> being deleted
        self._snapshots: dict[str, StoredGroups] = {}  # namespace -> as of its last change

    def fill(self, read: Callable[[], Iterable[Obj]]) -> None:
        """Start from what the cache holds: `read()` is called with the lock held, so an event
        stored after it is heard by on_event and none is lost (hear them before filling)."""
        with self._lock:
            for obj in read():
                self._move(obj, readable_claim(obj, self._admitted_at), gone=False)

    def on_event(self, event_type: str, obj: Obj) -> None:
        gone = event_type == "DELETED"
        entry = None if gone else readable_claim(obj, self._admitted_at)
        with self._lock:
            self._move(obj, entry, gone)

    def of(self, namespace: str) -> StoredGroups:
        with self._lock:
            snapshot = self._snapshots.get(namespace)
            if snapshot is None:
                live = self._live.get(namespace)
                if live is None:
                    return EMPTY
                sums = {cls: dict(amounts) for cls, amounts in self._sums[namespace].items()}
                snapshot = StoredGroups(
                    MappingProxyType(self._claims[namespace].copy()),
                    MappingProxyType(sums),
                    MappingProxyType(live.copy()),
                )
                self._snapshots[namespace] = snapshot
            return snapshot

    def _move(self, obj: Obj, entry: Entry | None, gone: bool) -> None:
        """The group of `obj` is stored as `obj` says and claims `entry` (None: nothing), or
        (`gone`) is no longer stored."""
        meta = obj.get("metadata") or {}
        namespace, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid") or ""
        uids = self._uids.setdefault(namespace, {})
        claims = self._claims.setdefault(namespace, {})
        sums = self._sums.setdefault(namespace, {})
        live = self._live.setdefault(namespace, {})
        old_uid = uids.pop(name, None)
        if old_uid is not None:
            live.pop(old_uid, None)
            old = claims.pop(old_uid, None)
            if old is not None:
                add_into(sums.setdefault(old.priority_class, {}), old.positive_nanos(), -1)
        if not gone and uid:
            uids[name] = uid
            live[uid] = bool(meta.get("deletionTimestamp"))
            if entry is not None:
                claims[entry.uid] = entry
                add_into(sums.setdefault(entry.priority_class, {}), entry.positive_nanos(), 1)
        self._snapshots.pop(namespace, None)
        if not uids:
            del self._claims[namespace], self._uids[namespace], self._sums[namespace]
            del self._live[namespace]
