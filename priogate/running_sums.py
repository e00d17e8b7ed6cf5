"""Sums kept for many queries: amounts in nano-units (resources.nano_units, exact) summed by
priority, or in an order with running totals. Pure; priogate.enqueue_index's building blocks."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from fractions import Fraction
from itertools import accumulate

from priogate.enqueue import BoundPod, GroupDemand

Nanos = dict[str, int | Fraction]


def add_into(total: Nanos, amounts: Mapping[str, int | Fraction], sign: int = 1) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + sign * amount


class Ordered:
    """Groups in enqueue order, each with an amount per resource (lists aligned with the order),
    and the running sums, built on first read. Moved by inserts and removals (list memmoves and
    C-level accumulations, not a Python loop per group)."""

    __slots__ = ("_running", "groups", "orders", "values")

    def __init__(self, entries: Iterable[tuple[GroupDemand, Mapping[str, int | Fraction]]] = ()) -> None:
        ordered = sorted(entries, key=lambda entry: entry[0].order)
        self.groups = [group for group, _ in ordered]
        self.orders = [group.order for group in self.groups]
        names = {name for _, amounts in ordered for name in amounts}
        self.values = {name: [amounts.get(name, 0) for _, amounts in ordered] for name in names}
        self._running: dict[str, list[int | Fraction]] | None = None

    def copy(self) -> Ordered:
        new = Ordered()
        new.groups, new.orders = list(self.groups), list(self.orders)
        new.values = {name: list(values) for name, values in self.values.items()}
        return new

    def insert(self, group: GroupDemand, amounts: Mapping[str, int | Fraction]) -> None:
        at = bisect_right(self.orders, group.order)
        self.groups.insert(at, group)
        self.orders.insert(at, group.order)
        for name, values in self.values.items():
            values.insert(at, amounts.get(name, 0))
        for name in amounts.keys() - self.values.keys():
            values = [0] * len(self.orders)
            values[at] = amounts[name]
            self.values[name] = values
        self._running = None

    def remove(self, group: GroupDemand) -> None:
        at = bisect_left(self.orders, group.order)
        while self.groups[at] is not group:  # equal orders: only with equal keys
            at += 1
        del self.groups[at], self.orders[at]
        for values in self.values.values():
            del values[at]
        self._running = None

    def before(self, order: tuple[int, str, str]) -> int:
        """How many come before `order`."""
        return bisect_left(self.orders, order)

    def _sums(self) -> dict[str, list[int | Fraction]]:
        running = self._running
        if running is None:
            running = {name: list(accumulate(values, initial=0)) for name, values in self.values.items()}
            self._running = running
        return running

    def first(self, count: int, name: str) -> int | Fraction:
        sums = self._sums().get(name)
        return 0 if sums is None else sums[count]

    def first_all(self, count: int) -> Nanos:
        return {name: sums[count] for name, sums in self._sums().items() if sums[count]}


class HeldByPriority:
    """Amounts summed by priority, for "what do those of priority >= p hold"."""

    def __init__(self, items: Iterable[tuple[int, Mapping[str, int | Fraction]]]) -> None:
        self.per_priority: dict[int, Nanos] = {}
        for priority, amounts in items:
            add_into(self.per_priority.setdefault(priority, {}), amounts)
        highest_first = sorted(self.per_priority, reverse=True)
        self._negated = [-p for p in highest_first]
        names = {name for amounts in self.per_priority.values() for name in amounts}
        self._running = {
            name: list(accumulate((self.per_priority[p].get(name, 0) for p in highest_first), initial=0))
            for name in names
        }

    @classmethod
    def of_pods(cls, bound: Iterable[BoundPod]) -> HeldByPriority:
        return cls((pod.priority, pod.requests_nanos) for pod in bound)

    def held(self, name: str, at_least: int | None) -> int | Fraction:
        """What those of priority >= `at_least` hold of `name` (None: all of them)."""
        sums = self._running.get(name)
        if sums is None:
            return 0
        return sums[len(self._negated) if at_least is None else bisect_right(self._negated, -at_least)]
