"""Whether a quota was lowered below a namespace's stored groups' reservations (every reconcile
in the namespace asks), from the watch caches.

Each namespace's reservations are kept summed per priority class in nano-units, and moved by
what changed: a group whose object is the one read last time (the caches replace an object on
every change) is not read again, and one re-delivered with the same resourceVersion is not
parsed again. Nano-unit sums are exact, so the answer is the one a fresh sum gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from controller.caches import Caches
from controller.pods_view import version
from priogate.ledger.stored_groups import entry_of_group
from priogate.quota import class_totals, over_reserved, positive_nanos

Nanos = dict[str, int | Fraction]
# A stored group's part: its class and positive reservation in nano-units; None if unreadable.
_Part = tuple[str, Nanos] | None


class _Totals:
    def __init__(self) -> None:
        self.seen: dict[str, tuple[Mapping[str, Any], _Part]] = {}  # by group name
        self.sums: dict[str, Nanos] = {}  # by class
        self.counts: dict[str, int] = {}  # readable reservations by class

    def move(self, part: _Part, sign: int) -> None:
        if part is None:
            return
        cls, amounts = part
        self.counts[cls] = self.counts.get(cls, 0) + sign
        total = self.sums.setdefault(cls, {})
        for name, amount in amounts.items():
            total[name] = total.get(name, 0) + sign * amount
        if not self.counts[cls]:
            del self.counts[cls], self.sums[cls]


class OverQuota:
    def __init__(self, caches: Caches) -> None:
        self.caches = caches
        self._totals: dict[str, _Totals] = {}
        self._parts: dict[str, tuple[str, _Part]] = {}  # by uid: (resourceVersion, part)
        self._parts_kept = 0  # how many were live at the last pruning
        # namespace -> (the caches' generations it was computed at, the answer)
        self._answers: dict[str, tuple[tuple[int, int], str | None]] = {}

    def answer(self, namespace: str) -> str | None:
        """Reused until the namespace's groups or quotas change."""
        key = (
            self.caches.podgroups.namespace_generation(namespace),
            self.caches.quotas.namespace_generation(namespace),
        )
        known = self._answers.get(namespace)
        if known is not None and known[0] == key:
            return known[1]
        answer = self._now(namespace)
        self._answers[namespace] = (key, answer)
        return answer

    def _now(self, namespace: str) -> str | None:
        totals = self._totals.setdefault(namespace, _Totals())
        stored = self.caches.podgroups.namespace(namespace)
        for name in [n for n in totals.seen if n not in stored]:  # deleted
            totals.move(totals.seen.pop(name)[1], -1)
        for name, group in stored.items():
            seen = totals.seen.get(name)
            if seen is not None and seen[0] is group:
                continue
            part = self._part(group)
            if seen is not None:
                totals.move(seen[1], -1)
            totals.move(part, 1)
            totals.seen[name] = (group, part)
        if len(self._parts) > 2 * self._parts_kept + 64:  # amortized: O(1) a call
            live = {version(g)[0] for g in self.caches.podgroups.items()}
            self._parts = {uid: p for uid, p in self._parts.items() if uid in live}
            self._parts_kept = len(self._parts)
        if not totals.counts:
            return None
        try:
            return over_reserved(
                self.caches.quotas.namespace(namespace).values(), class_totals(totals.sums.items())
            )
        except ValueError:
            return None  # a malformed quota: the enqueue verdict says so

    def _part(self, group: Mapping[str, Any]) -> _Part:
        uid, group_version = version(group)
        known = self._parts.get(uid)
        if known is None or known[0] != group_version or not group_version:
            try:
                reservation = entry_of_group(group, "").reservation()
                known = (group_version, (reservation.priority_class, positive_nanos(reservation)))
            except (ValueError, TypeError):
                known = (group_version, None)
            self._parts[uid] = known
        return known[1]
