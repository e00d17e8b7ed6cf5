"""The enqueue verdicts of one view of the cluster (its unfinished groups, bound pods,
allocatable and quotas), each in O(log n) sums however many groups and pods it holds. Pure.

The policy is priogate.enqueue's. Stated one group at a time, a verdict walks every other
unfinished group (which waiting ones are ahead of it, which hold quota and capacity) and every
bound pod, so reconciling each of a namespace's N groups costs O(N^2), and O(pods) each. But
every sum a verdict reads is over groups picked by a threshold on the enqueue order or on
priority, plus the namespace:
- capacity held by bound pods and holding groups of priority >= p: sums by priority, highest
  first, with running totals;
- the waiting groups ahead of a waiting group: the eligible ones (waiting, not backing off,
  with minResources that fit allocatable) before it in the enqueue order, except another
  namespace's group its own quota refuses, and a same-namespace group that can never fit its
  quota: running totals in enqueue order, all namespaces and per namespace;
- the quota reservations: per namespace and priority class (a quota's scopes judge the class
  only), the holding groups' sum plus the running totals of the ahead ones.
A group's own entry in the view is never one of its "others": its part is taken back out.

Amounts are summed in nano-units (resources.nano_units), exactly, so every comparison is the one
the one-group-at-a-time walk makes; tests/unit/test_enqueue_index.py checks that on random clusters.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import accumulate
from typing import Any

from priogate.enqueue import (
    WAITING_PHASES,
    BoundPod,
    GroupDemand,
    before_the_view,
    capacity_problem,
    check_quota,
    never_fits_quota,
)
from priogate.phase import EnqueueVerdict
from priogate.podgroup import HOLDING_PHASES
from priogate.quota import Reservation
from priogate.resources import ResourceList, nano_units

Nanos = dict[str, int | Fraction]
_NANO = 10**9


def _add_into(total: Nanos, amounts: Mapping[str, int | Fraction], sign: int = 1) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + sign * amount


class _Running:
    """Per resource, the sums of the first i amounts of a list, for every i."""

    __slots__ = ("_sums",)

    def __init__(self, amounts: Sequence[Mapping[str, int | Fraction]]) -> None:
        names = {name for each in amounts for name in each}
        self._sums = {
            name: list(accumulate((each.get(name, 0) for each in amounts), initial=0)) for name in names
        }

    def first(self, count: int, name: str) -> int | Fraction:
        sums = self._sums.get(name)
        return 0 if sums is None else sums[count]

    def first_all(self, count: int) -> Nanos:
        return {name: sums[count] for name, sums in self._sums.items() if sums[count]}


class HeldByPriority:
    """Amounts summed by priority, for "what do those of priority >= p hold"."""

    def __init__(self, items: Iterable[tuple[int, Mapping[str, int | Fraction]]]) -> None:
        self.per_priority: dict[int, Nanos] = {}
        for priority, amounts in items:
            _add_into(self.per_priority.setdefault(priority, {}), amounts)
        highest_first = sorted(self.per_priority, reverse=True)
        self._negated = [-p for p in highest_first]
        self._running = _Running([self.per_priority[p] for p in highest_first])

    @classmethod
    def of_pods(cls, bound: Iterable[BoundPod]) -> HeldByPriority:
        return cls((pod.priority, pod.requests_nanos) for pod in bound)

    def held(self, name: str, at_least: int | None) -> int | Fraction:
        """What those of priority >= `at_least` hold of `name` (None: all of them)."""
        count = len(self._negated) if at_least is None else bisect_right(self._negated, -at_least)
        return self._running.first(count, name)


class _Namespace:
    """One namespace's part of a view. Reused by the next view while the namespace's groups,
    quotas and the allocatable are the same objects."""

    def __init__(
        self,
        groups: Sequence[GroupDemand],
        quotas: Sequence[Mapping[str, Any]],
        allocatable: ResourceList,
        allocatable_nanos: Mapping[str, int | Fraction],
    ) -> None:
        self.groups, self.quotas, self.allocatable = groups, quotas, allocatable
        self.by_key: dict[str, list[tuple[int, GroupDemand]]] = {}
        for index, group in enumerate(groups):
            self.by_key.setdefault(group.key, []).append((index, group))
        holding = [g for g in groups if g.phase in HOLDING_PHASES]
        self.holding = HeldByPriority((g.priority, g.unconsumed_nanos) for g in holding)
        # What its holding groups still add to the quotas' used, by priority class.
        self.holders: dict[str, Nanos] = {}
        for group in holding:
            _add_into(self.holders.setdefault(group.priority_class, {}), group.quota_demand_nanos)
        # The waiting groups that can be ahead of another (the others never are), in enqueue
        # order, by position in the namespace's list (the walk raises the first error).
        self.eligible = sorted(
            (
                (index, group)
                for index, group in enumerate(groups)
                if group.phase in WAITING_PHASES
                and not group.backing_off
                and group.min_resources
                and _fits(group.unconsumed_nanos, allocatable_nanos)
            ),
            key=lambda entry: entry[1].order,
        )
        self.eligible_index = {index for index, _ in self.eligible}
        self.orders = [group.order for _, group in self.eligible]
        # Capacity: what they count for a group of another namespace: all but those its own
        # quota refuses now.
        self.unblocked = _Running([{} if g.quota_blocked else g.unconsumed_nanos for _, g in self.eligible])
        self.any_unblocked = any(not g.quota_blocked for _, g in self.eligible)
        self._quota_part: _QuotaPart | None = None

    def quota_part(self) -> _QuotaPart:
        if self._quota_part is None:
            self._quota_part = _QuotaPart(self.quotas, self.eligible)
        return self._quota_part


class _QuotaPart:
    """Which of a namespace's eligible waiting groups can fit its quotas at all (only those are
    ahead of a group of the namespace), built on the namespace's first verdict."""

    def __init__(
        self, quotas: Sequence[Mapping[str, Any]], eligible: Sequence[tuple[int, GroupDemand]]
    ) -> None:
        # Tested once per class and demand: a namespace's groups come in few shapes. A test that
        # raised (a malformed quota) is kept with the group's position.
        tested: dict[tuple[str, frozenset[tuple[str, int | Fraction]]], bool | ValueError] = {}
        self.fitting: set[int] = set()
        self.errors: list[tuple[int, GroupDemand, ValueError]] = []
        by_class: dict[str, tuple[list[tuple[int, str, str]], list[Nanos]]] = {}
        for index, group in eligible:
            shape = group.quota_shape
            if shape not in tested:
                try:
                    tested[shape] = not never_fits_quota(group, quotas)
                except ValueError as e:
                    tested[shape] = e
            fits = tested[shape]
            if isinstance(fits, ValueError):
                self.errors.append((index, group, fits))
            elif fits:
                self.fitting.add(index)
                orders, amounts = by_class.setdefault(group.priority_class, ([], []))
                orders.append(group.order)
                amounts.append(group.quota_demand_nanos)
        self.errors.sort(key=lambda e: e[0])
        # Capacity, for a group of the namespace: those that can fit the quota.
        self.fits = _Running([g.unconsumed_nanos if i in self.fitting else {} for i, g in eligible])
        self.ahead_by_class = {
            cls: (orders, _Running(amounts)) for cls, (orders, amounts) in by_class.items()
        }


def _fits(demand: Mapping[str, int | Fraction], allocatable: Mapping[str, int | Fraction]) -> bool:
    return not any(amount > allocatable.get(name, 0) for name, amount in demand.items())


class Verdicts:
    """The verdicts of one view: `namespaces` every unfinished group by namespace (holding or
    waiting, the group asked about among them or not; a group's key names its namespace),
    `quotas_of(namespace)` a namespace's ResourceQuotas. `previous`: the last view's, whose
    namespace parts are reused where the groups' list, the quotas' list and allocatable are the
    same objects (give a new list when one changes)."""

    def __init__(
        self,
        namespaces: Mapping[str, Sequence[GroupDemand]],
        bound: HeldByPriority,
        allocatable: ResourceList,
        quotas_of: Callable[[str], Sequence[Mapping[str, Any]]],
        previous: Verdicts | None = None,
    ) -> None:
        self._bound = bound
        self._allocatable = allocatable
        self._allocatable_nanos = nano_units(allocatable)
        self._quotas_of = quotas_of
        self._parts: dict[str, _Namespace] = {}
        kept = previous._parts if previous is not None else {}
        for namespace, groups in namespaces.items():
            quotas = quotas_of(namespace)
            part = kept.get(namespace)
            if (
                part is None
                or part.groups is not groups
                or part.quotas is not quotas
                or part.allocatable is not allocatable
            ):
                part = _Namespace(groups, quotas, allocatable, self._allocatable_nanos)
            self._parts[namespace] = part
        self._holding = HeldByPriority(
            item for part in self._parts.values() for item in part.holding.per_priority.items()
        )
        self._unblocked = [part for part in self._parts.values() if part.any_unblocked]

    def _part(self, namespace: str) -> _Namespace:
        part = self._parts.get(namespace)
        if part is None:  # no group of the view in it
            part = _Namespace([], self._quotas_of(namespace), self._allocatable, self._allocatable_nanos)
            self._parts[namespace] = part
        return part

    def verdict(self, group: GroupDemand) -> EnqueueVerdict:
        """Raises ValueError for a malformed quota, as the quota functions do."""
        early = before_the_view(group)
        if early is not None:
            return early
        ns = self._part(group.namespace)
        quota = ns.quota_part()
        waiting = group.phase in WAITING_PHASES  # an admitted group has none ahead of it
        own = ns.by_key.get(group.key, [])
        if waiting:
            for _index, other, error in quota.errors:  # the walk tests same-namespace groups ahead
                if other.key != group.key and other.order < group.order:
                    raise ValueError(*error.args)
        problem = check_quota(group, ns.quotas, self._holders(group, ns, quota, waiting, own))
        return EnqueueVerdict(False, problem) if problem else self._capacity(group, ns, quota, waiting, own)

    @staticmethod
    def _ahead(index: int, other: GroupDemand, group: GroupDemand, ns: _Namespace, quota: _QuotaPart) -> bool:
        """Whether the namespace's entry `index` is ahead of waiting `group` of the namespace."""
        return index in ns.eligible_index and other.order < group.order and index in quota.fitting

    def _holders(
        self,
        group: GroupDemand,
        ns: _Namespace,
        quota: _QuotaPart,
        waiting: bool,
        own: list[tuple[int, GroupDemand]],
    ) -> list[Reservation]:
        """What the namespace's holding groups and the waiting groups ahead reserve, one
        Reservation per priority class (a quota applies by class: the sums are the same)."""
        by_class = {cls: dict(amounts) for cls, amounts in ns.holders.items()}
        if waiting:
            for cls, (orders, running) in quota.ahead_by_class.items():
                _add_into(by_class.setdefault(cls, {}), running.first_all(bisect_left(orders, group.order)))
        for index, other in own:  # the group's own entry in the view is not one of its others
            if other.phase in HOLDING_PHASES or (waiting and self._ahead(index, other, group, ns, quota)):
                _add_into(by_class[other.priority_class], other.quota_demand_nanos, -1)
        return [
            Reservation("", cls, {name: _fraction(amount) for name, amount in sums.items()})
            for cls, sums in by_class.items()
        ]

    def _capacity(
        self,
        group: GroupDemand,
        ns: _Namespace,
        quota: _QuotaPart,
        waiting: bool,
        own: list[tuple[int, GroupDemand]],
    ) -> EnqueueVerdict:
        demand = group.unconsumed_nanos
        if not demand:
            return EnqueueVerdict(True)
        at_least = group.priority if group.preempts else None  # lower pods count unless it may preempt
        # Ahead of it: the waiting groups before it of every other namespace but those their own
        # quota refuses now; of its own namespace, those that can fit the quota.
        others = (
            [(p, bisect_left(p.orders, group.order)) for p in self._unblocked if p is not ns]
            if waiting
            else []
        )
        here = bisect_left(ns.orders, group.order) if waiting else 0
        short = []
        for name, amount in demand.items():
            held = self._bound.held(name, at_least) + self._holding.held(name, at_least)
            held += sum(part.unblocked.first(count, name) for part, count in others) + quota.fits.first(
                here, name
            )
            for index, other in own:
                holds = other.phase in HOLDING_PHASES and (at_least is None or other.priority >= at_least)
                if holds or (waiting and self._ahead(index, other, group, ns, quota)):
                    held -= other.unconsumed_nanos.get(name, 0)
            if amount > self._allocatable_nanos.get(name, 0) - held:
                short.append(name)
        problem = capacity_problem(group, sorted(short), self._allocatable)
        return EnqueueVerdict(problem is None, problem or "")


def _fraction(nanos: int | Fraction) -> Fraction:
    return Fraction(nanos, _NANO) if isinstance(nanos, int) else nanos / _NANO


def verdict(
    group: GroupDemand,
    quotas: Sequence[Mapping[str, Any]],
    allocatable: ResourceList,
    bound: Sequence[BoundPod],
    others: Sequence[GroupDemand],
) -> EnqueueVerdict:
    """One verdict without a kept view. `quotas`: the group's namespace's; `others`: the other
    unfinished groups, holding or waiting; the policy picks which count."""
    by_namespace: dict[str, list[GroupDemand]] = {}
    for other in others:
        by_namespace.setdefault(other.namespace, []).append(other)
    verdicts = Verdicts(by_namespace, HeldByPriority.of_pods(bound), allocatable, lambda _namespace: quotas)
    return verdicts.verdict(group)
