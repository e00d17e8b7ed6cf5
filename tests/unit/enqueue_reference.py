"""The enqueue verdict as priogate.enqueue computed it before priogate.enqueue_index: one
group at a time, walking every other unfinished group and every bound pod. Kept as the
reference the index must agree with (tests/unit/test_enqueue_index.py), and moved with the
policy: only a group's own namespace's waiting groups are ahead of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from priogate.enqueue import WAITING_PHASES, ZERO, BoundPod, GroupDemand
from priogate.phase import INQUEUE_TIMEOUT, EnqueueVerdict
from priogate.podgroup import HOLDING_PHASES
from priogate.quota import Consumer, Reservation, first_exceeded, format_amounts
from priogate.resources import ResourceList, add, subtract


def waiting_ahead(
    group: GroupDemand,
    others: Iterable[GroupDemand],
    quotas: Sequence[Mapping[str, Any]],
    allocatable: ResourceList,
) -> list[GroupDemand]:
    """The waiting groups whose demand counts as held when `group` is decided: of its
    namespace, ahead of it in the enqueue order, not backing off, and able to fit at all. An
    admitted group has none."""
    if group.phase not in WAITING_PHASES:
        return []
    ahead = []
    for other in others:
        if other.key == group.key or other.phase not in WAITING_PHASES or other.backing_off:
            continue
        if other.namespace != group.namespace:
            continue  # another tenant's queue: what fits goes in whatever waits there
        if not other.min_resources or other.order >= group.order:
            continue
        if any(amount > allocatable.get(name, ZERO) for name, amount in other.unconsumed.items()):
            continue  # can never fit the cluster: it would block everyone behind it for ever
        if (
            first_exceeded(quotas, Consumer(other.priority_class), other.quota_demand, [], count_used=False)
            is not None
        ):
            continue  # can never fit its quota
        ahead.append(other)
    return ahead


def check_quota(
    group: GroupDemand,
    quotas: Sequence[Mapping[str, Any]],
    others: Iterable[GroupDemand],
    ahead: Iterable[GroupDemand] = (),
) -> str | None:
    demand = group.quota_demand
    holding = [o for o in others if o.phase in HOLDING_PHASES]
    holders = [
        Reservation(o.key, o.priority_class, o.quota_demand)
        for o in [*holding, *ahead]
        if o.namespace == group.namespace and o.key != group.key
    ]
    found = first_exceeded(quotas, Consumer(group.priority_class), demand, holders, count_used=True)
    if found is None:
        return None
    # No used/reserved amounts in the text: they change with every pod, and the text goes into a
    # status condition, which would then be rewritten on every resync.
    return (
        f"quota {found.quota} insufficient: requested {format_amounts(found.over, demand)} on top of "
        f"what is used and reserved by other PodGroups, limited {format_amounts(found.over, found.hard)}"
    )


def check_capacity(
    group: GroupDemand,
    allocatable: ResourceList,
    bound: Iterable[BoundPod],
    others: Iterable[GroupDemand],
    ahead: Iterable[GroupDemand] = (),
) -> str | None:
    demand = group.unconsumed
    if not demand:
        return None
    held: ResourceList = {}
    for pod in bound:
        if pod.priority >= group.priority or not group.preempts:
            held = add(held, pod.requests)
    for other in others:
        if other.key == group.key or other.phase not in HOLDING_PHASES:
            continue
        if other.priority >= group.priority or not group.preempts:
            held = add(held, other.unconsumed)
    for other in ahead:  # of at least this group's priority by the order
        held = add(held, other.unconsumed)
    free = subtract(allocatable, held)
    short = sorted(name for name, amount in demand.items() if amount > free.get(name, ZERO))
    if short:
        return (
            f"cluster capacity insufficient: minResources {format_amounts(short, demand)} exceed what is not "
            f"held by pods and PodGroups of priority >= {group.priority} and older waiting PodGroups of "
            f"its namespace (allocatable {format_amounts(short, allocatable)})"
        )
    return None


def verdict(
    group: GroupDemand,
    quotas: Sequence[Mapping[str, Any]],
    allocatable: ResourceList,
    bound: Sequence[BoundPod],
    others: Sequence[GroupDemand],
) -> EnqueueVerdict:
    """`others`: the other unfinished groups, holding or waiting; the function picks which count."""
    if group.backing_off:
        return EnqueueVerdict(False, "backing off after an Inqueue timeout", INQUEUE_TIMEOUT)
    if not group.min_resources:
        return EnqueueVerdict(True, "no minResources")  # Volcano enqueues such groups at once
    ahead = waiting_ahead(group, others, quotas, allocatable)
    problem = check_quota(group, quotas, others, ahead) or check_capacity(
        group, allocatable, bound, others, ahead
    )
    return EnqueueVerdict(problem is None, problem or "")
