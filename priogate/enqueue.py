"""The enqueue policy: may a Pending PodGroup move to Inqueue (hold resources) now? Pure.

The two tests of the enqueue action in kube-batch's "Delay Pod Creation" design
(kubernetes-sigs/kube-batch doc/design/delay-pod-creation.md), as Volcano implements them
(pkg/scheduler/plugins/resourcequota and pkg/scheduler/plugins/overcommit), with this
project's preemption folded in:

1. quota: for every ResourceQuota of the namespace that applies to the group,
   used + the unconsumed minResources of the namespace's other Inqueue/Running groups
   + this group's unconsumed minResources <= hard;
2. capacity: this group's unconsumed minResources fit in the cluster's allocatable minus what
   is held by bound pods and other Inqueue/Running groups' unconsumed minResources *of at least
   this group's priority*. Lower-priority pods do not count, because the controller's gang
   preemption can take their place (unless the group's preemptionPolicy is Never).

"Unconsumed" is minResources minus the requests of the group's own bound members, so a group
never competes with itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from priogate.phase import EnqueueVerdict
from priogate.podgroup import HOLDING_PHASES
from priogate.quota import Consumer, Reservation, first_exceeded, format_amounts, quota_names
from priogate.quota import min_resources_of as min_resources_of  # re-exported: callers read it here
from priogate.resources import ResourceList, add, subtract

ZERO = Fraction(0)


@dataclass(frozen=True)
class GroupDemand:
    key: str  # namespace/name
    namespace: str
    priority_class: str
    priority: int
    preempts: bool  # may take lower-priority pods' place (preemptionPolicy is not Never)
    phase: str
    min_member: int
    min_resources: ResourceList  # resource names without "requests."
    consumed: ResourceList  # requests of its bound, unfinished members
    bound_members: int = 0  # members bound and unfinished (already in a quota's status.used)

    @property
    def unconsumed(self) -> ResourceList:
        return {
            name: amount for name, amount in subtract(self.min_resources, self.consumed).items() if amount > 0
        }


@dataclass(frozen=True)
class BoundPod:
    priority: int
    requests: ResourceList


def check_quota(
    group: GroupDemand, quotas: Sequence[Mapping[str, Any]], others: Iterable[GroupDemand]
) -> str | None:
    # Members already bound are in status.used: only the unconsumed part and the pods still to
    # come count against hard.
    pending_members = max(group.min_member - group.bound_members, 0)
    demand = quota_names(group.unconsumed, pending_members)
    holders = [
        Reservation(o.key, o.priority_class, quota_names(o.unconsumed, 0))
        for o in others
        if o.namespace == group.namespace and o.key != group.key and o.phase in HOLDING_PHASES
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
    free = subtract(allocatable, held)
    short = sorted(name for name, amount in demand.items() if amount > free.get(name, ZERO))
    if short:
        return (
            f"cluster capacity insufficient: minResources {format_amounts(short, demand)} exceed what is not "
            f"held by pods and PodGroups of priority >= {group.priority} "
            f"(allocatable {format_amounts(short, allocatable)})"
        )
    return None


def verdict(
    group: GroupDemand,
    quotas: Sequence[Mapping[str, Any]],
    allocatable: ResourceList,
    bound: Sequence[BoundPod],
    others: Sequence[GroupDemand],
) -> EnqueueVerdict:
    if not group.min_resources:
        return EnqueueVerdict(True, "no minResources")  # Volcano enqueues such groups at once
    problem = check_quota(group, quotas, others) or check_capacity(group, allocatable, bound, others)
    return EnqueueVerdict(problem is None, problem or "")
