"""The enqueue policy: may a Pending PodGroup move to Inqueue (hold resources) now? Pure.

The seed's two tests (kube-batch "Delay Pod Creation", Volcano's resourcequota and overcommit
plugins), with this project's preemption folded in:

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

from priogate.phase import Enqueue
from priogate.quota import Consumer, hard_limits, quota_applies, quota_names
from priogate.quota import used as quota_used
from priogate.resources import ResourceList, add, format_quantity, parse_resource_list, subtract

ZERO = Fraction(0)
HOLDING_PHASES = ("Inqueue", "Running", "Unknown")


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


def min_resources_of(raw: Mapping[str, object] | None) -> ResourceList:
    """spec.minResources as plain resource names: requests.cpu counts as cpu; limits.* and pod
    counts are left to the webhook's quota check."""
    out: ResourceList = {}
    for name, amount in parse_resource_list(raw, context="spec.minResources").items():
        base = name.removeprefix("requests.")
        if base.startswith("limits.") or base in ("pods", "count/pods"):
            continue
        out[base] = out.get(base, ZERO) + amount
    return out


def _fmt(names: Iterable[str], amounts: Mapping[str, Fraction]) -> str:
    return ", ".join(f"{n}={format_quantity(amounts.get(n, ZERO))}" for n in names)


def check_quota(
    group: GroupDemand, quotas: Sequence[Mapping[str, Any]], others: Iterable[GroupDemand]
) -> str | None:
    # Members already bound are in status.used: only the unconsumed part and the pods still to
    # come count against hard.
    pending_members = max(group.min_member - group.bound_members, 0)
    demand = quota_names(group.unconsumed, pending_members)
    holders = [o for o in others if o.namespace == group.namespace and o.key != group.key]
    holders = [o for o in holders if o.phase in HOLDING_PHASES]
    for quota in sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name", ""))):
        if not quota_applies(quota, Consumer(group.priority_class)):
            continue
        hard, used = hard_limits(quota), quota_used(quota)
        reserved: ResourceList = {}
        for other in holders:
            if quota_applies(quota, Consumer(other.priority_class)):
                reserved = add(reserved, quota_names(other.unconsumed, 0))
        over = sorted(
            name
            for name, limit in hard.items()
            if demand.get(name, ZERO) > 0
            and used.get(name, ZERO) + reserved.get(name, ZERO) + demand[name] > limit
        )
        if over:
            name = (quota.get("metadata") or {}).get("name", "")
            # No used/reserved amounts in the text: they change with every pod, and the text
            # goes into a status condition, which would then be rewritten on every resync.
            return (
                f"quota {name} insufficient: requested {_fmt(over, demand)} on top of what is used "
                f"and reserved by other PodGroups, limited {_fmt(over, hard)}"
            )
    return None


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
            f"cluster capacity insufficient: minResources {_fmt(short, demand)} exceed what is not "
            f"held by pods and PodGroups of priority >= {group.priority} "
            f"(allocatable {_fmt(short, allocatable)})"
        )
    return None


def verdict(
    group: GroupDemand,
    quotas: Sequence[Mapping[str, Any]],
    allocatable: ResourceList,
    bound: Sequence[BoundPod],
    others: Sequence[GroupDemand],
) -> Enqueue:
    if not group.min_resources:
        return Enqueue(True, "no minResources")  # Volcano enqueues such groups at once
    problem = check_quota(group, quotas, others) or check_capacity(group, allocatable, bound, others)
    return Enqueue(problem is None, problem or "")
