"""The enqueue verdicts of one view of the cluster (its unfinished groups, bound pods,
allocatable and quotas), each in O(log n) sums however many groups and pods it holds. Pure.

The policy is priogate.enqueue's. Stated one group at a time, a verdict walks every other
unfinished group (which waiting ones are ahead of it, which hold quota and capacity) and every
bound pod, so reconciling each of a namespace's N groups costs O(N^2), and O(pods) each. But
every sum a verdict reads is over groups picked by a threshold on the enqueue order or on
priority, plus the namespace:
- capacity held by bound pods and holding groups of priority >= p: sums by priority, highest
  first, with running totals;
- the waiting groups ahead of a waiting group: those of its namespace (each namespace is a
  queue of its own) that are eligible (waiting, not backing off, with minResources that fit
  allocatable and a demand that can fit the namespace's quotas) and before it in the enqueue
  order: running totals in enqueue order, per namespace;
- the quota reservations: per namespace and priority class (a quota's scopes judge the class
  only), the holding groups' sum plus the running totals of the ahead ones.
A group's own entry in the view is never one of its "others": its part is taken back out.

Amounts are summed in nano-units (resources.nano_units), exactly, so every comparison is the one
the one-group-at-a-time walk makes; tests/unit/test_enqueue_index.py checks that on random clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
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
from priogate.running_sums import HeldByPriority, Nanos, Ordered, add_into

_NANO = 10**9


class _Namespace:
    """One namespace's part of a view. The next view reuses it while the namespace's groups,
    quotas and the allocatable are the same objects, or moves a copy by the groups that changed
    (the groups are told apart by identity: a list holds each of its groups once)."""

    def __init__(
        self,
        groups: Sequence[GroupDemand],
        quotas: Sequence[Mapping[str, Any]],
        allocatable: ResourceList,
        allocatable_nanos: Mapping[str, int | Fraction],
    ) -> None:
        self.groups, self.quotas, self.allocatable = groups, quotas, allocatable
        self.allocatable_nanos = allocatable_nanos
        by_key: dict[str, list[GroupDemand]] = {}
        for group in groups:
            by_key.setdefault(group.key, []).append(group)
        self.by_key = {key: tuple(same) for key, same in by_key.items()}
        holding = [g for g in groups if g.phase in HOLDING_PHASES]
        # Capacity held by its holding groups by priority; what they add to the quotas' used, by class.
        self.holding_sums: dict[int, Nanos] = {}
        self.holders: dict[str, Nanos] = {}
        for group in holding:
            add_into(self.holding_sums.setdefault(group.priority, {}), group.unconsumed_nanos)
            add_into(self.holders.setdefault(group.priority_class, {}), group.quota_demand_nanos)
        self.holding = HeldByPriority(self.holding_sums.items())
        # The waiting groups that can be ahead of another of the namespace (the others never are).
        self.eligible_ids = {id(g) for g in groups if self._eligible(g)}
        self._quota_part: _QuotaPart | None = None

    def _eligible(self, group: GroupDemand) -> bool:
        return (
            group.phase in WAITING_PHASES
            and not group.backing_off
            and bool(group.min_resources)
            and not any(a > self.allocatable_nanos.get(n, 0) for n, a in group.unconsumed_nanos.items())
        )

    def quota_part(self) -> _QuotaPart:
        if self._quota_part is None:
            eligible = [g for g in self.groups if id(g) in self.eligible_ids]
            self._quota_part = _QuotaPart(self.quotas, eligible)
        return self._quota_part

    def moved(self, groups: Sequence[GroupDemand]) -> _Namespace | None:
        """A copy for `groups`, moved by the groups that differ from this one's; None when many
        do (a build is then as cheap)."""
        before = {id(g) for g in self.groups}
        after = {id(g) for g in groups}
        if len(after) != len(groups):
            return None
        removed = [g for g in self.groups if id(g) not in after]
        added = [g for g in groups if id(g) not in before]
        if len(removed) + len(added) > max(16, len(groups) // 4):
            return None
        new = object.__new__(_Namespace)
        new.groups, new.quotas, new.allocatable = groups, self.quotas, self.allocatable
        new.allocatable_nanos = self.allocatable_nanos
        new.by_key = dict(self.by_key)
        new.holding_sums = {p: dict(sums) for p, sums in self.holding_sums.items()}
        new.holders = {cls: dict(sums) for cls, sums in self.holders.items()}
        new.eligible_ids = set(self.eligible_ids)
        new._quota_part = self._quota_part.copy() if self._quota_part is not None else None
        for group in removed:
            new._move(group, -1)
        for group in added:
            new._move(group, 1)
        new.holding = HeldByPriority(new.holding_sums.items())
        return new

    def _move(self, group: GroupDemand, sign: int) -> None:
        same = self.by_key.get(group.key, ())
        same = (*same, group) if sign > 0 else tuple(g for g in same if g is not group)
        if same:
            self.by_key[group.key] = same
        else:
            del self.by_key[group.key]
        if group.phase in HOLDING_PHASES:
            add_into(self.holding_sums.setdefault(group.priority, {}), group.unconsumed_nanos, sign)
            add_into(self.holders.setdefault(group.priority_class, {}), group.quota_demand_nanos, sign)
        if not self._eligible(group):
            return
        if sign > 0:
            self.eligible_ids.add(id(group))
        else:
            self.eligible_ids.discard(id(group))
        if self._quota_part is not None:
            self._quota_part.move(group, sign)


class _QuotaPart:
    """Which of a namespace's eligible waiting groups can fit its quotas at all (only those are
    ahead of a group of the namespace), built on the namespace's first verdict."""

    def __init__(self, quotas: Sequence[Mapping[str, Any]], eligible: Sequence[GroupDemand]) -> None:
        self.quotas = quotas
        # Tested once per class and demand: a namespace's groups come in few shapes. A test that
        # raised (a malformed quota) is kept: the walk raises the first such group's error.
        self.tested: dict[tuple[str, frozenset[tuple[str, int | Fraction]]], bool | ValueError] = {}
        self.fitting: set[int] = set()
        self.errors: dict[int, ValueError] = {}
        fits = [self._test(group) for group in eligible]
        # Capacity, for a group of the namespace: those that can fit the quota.
        self.fits = Ordered(
            (g, g.unconsumed_nanos if ok is True else {}) for g, ok in zip(eligible, fits, strict=True)
        )
        self.by_class: dict[str, Ordered] = {}
        for cls in {g.priority_class for g, ok in zip(eligible, fits, strict=True) if ok is True}:
            self.by_class[cls] = Ordered(
                (g, g.quota_demand_nanos)
                for g, ok in zip(eligible, fits, strict=True)
                if ok is True and g.priority_class == cls
            )

    def _test(self, group: GroupDemand) -> bool | ValueError:
        shape = group.quota_shape
        fits = self.tested.get(shape)
        if fits is None:
            try:
                fits = not never_fits_quota(group, self.quotas)
            except ValueError as e:
                fits = e
            self.tested[shape] = fits
        if isinstance(fits, ValueError):
            self.errors[id(group)] = fits
        elif fits:
            self.fitting.add(id(group))
        return fits

    def copy(self) -> _QuotaPart:
        new = object.__new__(_QuotaPart)
        new.quotas, new.tested = self.quotas, self.tested  # the same quotas: the same answers
        new.fitting, new.errors = set(self.fitting), dict(self.errors)
        new.fits = self.fits.copy()
        new.by_class = {cls: ordered.copy() for cls, ordered in self.by_class.items()}
        return new

    def move(self, group: GroupDemand, sign: int) -> None:
        if sign > 0:
            fits = self._test(group)
            self.fits.insert(group, group.unconsumed_nanos if fits is True else {})
            if fits is True:
                self.by_class.setdefault(group.priority_class, Ordered()).insert(
                    group, group.quota_demand_nanos
                )
        else:
            self.fits.remove(group)
            if id(group) in self.fitting:
                self.by_class[group.priority_class].remove(group)
            self.fitting.discard(id(group))
            self.errors.pop(id(group), None)


class Verdicts:
    """The verdicts of one view: `namespaces` every unfinished group by namespace (holding or
    waiting, the group asked about among them or not; a group's key names its namespace; a list
    holds each group object once), `quotas_of(namespace)` a namespace's ResourceQuotas.
    `previous`: the last view's, whose namespace parts are reused (or moved by what changed)
    where the quotas' list and allocatable are the same objects: give a new quotas list when a
    namespace's quotas change."""

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
            if part is not None and (part.quotas is not quotas or part.allocatable is not allocatable):
                part = None
            if part is not None and part.groups is not groups:
                part = part.moved(groups)
            if part is None:
                part = _Namespace(groups, quotas, allocatable, self._allocatable_nanos)
            self._parts[namespace] = part
        self._holding = HeldByPriority(
            item for part in self._parts.values() for item in part.holding.per_priority.items()
        )

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
        own = ns.by_key.get(group.key, ())
        if waiting and quota.errors:  # the walk tests same-namespace groups ahead, in list order
            for other in ns.groups:
                error = quota.errors.get(id(other))
                if error is not None and other.key != group.key and other.order < group.order:
                    raise ValueError(*error.args)
        problem = check_quota(group, ns.quotas, self._holders(group, ns, quota, waiting, own))
        return EnqueueVerdict(False, problem) if problem else self._capacity(group, ns, quota, waiting, own)

    @staticmethod
    def _ahead(other: GroupDemand, group: GroupDemand, ns: _Namespace, quota: _QuotaPart) -> bool:
        """Whether the namespace's `other` is ahead of waiting `group` of the namespace."""
        return id(other) in ns.eligible_ids and other.order < group.order and id(other) in quota.fitting

    def _holders(
        self,
        group: GroupDemand,
        ns: _Namespace,
        quota: _QuotaPart,
        waiting: bool,
        own: Iterable[GroupDemand],
    ) -> list[Reservation]:
        """What the namespace's holding groups and the waiting groups ahead reserve, one
        Reservation per priority class (a quota applies by class: the sums are the same)."""
        by_class = {cls: dict(amounts) for cls, amounts in ns.holders.items()}
        if waiting:
            for cls, ordered in quota.by_class.items():
                add_into(by_class.setdefault(cls, {}), ordered.first_all(ordered.before(group.order)))
        for other in own:  # the group's own entry in the view is not one of its others
            if other.phase in HOLDING_PHASES or (waiting and self._ahead(other, group, ns, quota)):
                add_into(by_class[other.priority_class], other.quota_demand_nanos, -1)
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
        own: Iterable[GroupDemand],
    ) -> EnqueueVerdict:
        short = self._short(group, ns, quota, waiting, own)
        problem = capacity_problem(group, sorted(short), self._allocatable)
        return EnqueueVerdict(problem is None, problem or "")

    def _short(
        self,
        group: GroupDemand,
        ns: _Namespace,
        quota: _QuotaPart,
        waiting: bool,
        own: Iterable[GroupDemand],
    ) -> dict[str, int | Fraction]:
        """By how much (nano-units) the group's unconsumed minResources exceed what is free for
        it, per resource where they do."""
        at_least = group.priority if group.preempts else None  # lower pods count unless it may preempt
        # Ahead of it: its namespace's waiting groups before it that can fit the quota; another
        # namespace's waiting groups never are.
        here = quota.fits.before(group.order) if waiting else 0
        short: dict[str, int | Fraction] = {}
        for name, amount in group.unconsumed_nanos.items():
            held = self._bound.held(name, at_least) + self._holding.held(name, at_least)
            held += quota.fits.first(here, name)
            for other in own:
                holds = other.phase in HOLDING_PHASES and (at_least is None or other.priority >= at_least)
                if holds or (waiting and self._ahead(other, group, ns, quota)):
                    held -= other.unconsumed_nanos.get(name, 0)
            missing = amount - (self._allocatable_nanos.get(name, 0) - held)
            if missing > 0:
                short[name] = missing
        return short

    def shortfall(self, group: GroupDemand) -> ResourceList | None:
        """What a waiting group lacks only in capacity: per resource, by how much its unconsumed
        minResources exceed what is free for it. None when it is not held back by capacity
        alone (admitted, backing off, no minResources, a quota refuses it, or it could never
        fit the allocatable); an empty list when it fits. Raises ValueError for a malformed
        quota, as verdict() does."""
        if group.phase not in WAITING_PHASES or before_the_view(group) is not None:
            return None
        if any(a > self._allocatable_nanos.get(n, 0) for n, a in group.unconsumed_nanos.items()):
            return None
        ns = self._part(group.namespace)
        quota = ns.quota_part()
        own = ns.by_key.get(group.key, ())
        if check_quota(group, ns.quotas, self._holders(group, ns, quota, True, own)):
            return None
        short = self._short(group, ns, quota, True, own)
        return {name: _fraction(amount) for name, amount in short.items()}


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
