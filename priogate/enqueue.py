"""The enqueue policy: may a Pending PodGroup move to Inqueue (hold resources) now, and must an
Inqueue one go back? Pure.

The two tests of the enqueue action in kube-batch's "Delay Pod Creation" design
(kubernetes-sigs/kube-batch doc/design/delay-pod-creation.md), as Volcano implements them
(pkg/scheduler/plugins/resourcequota and pkg/scheduler/plugins/overcommit), with this
project's preemption folded in:

1. quota: for every ResourceQuota of the namespace that applies to the group,
   used + what the namespace's other holding groups and the waiting groups ahead of it still
   have to create + what this group still has to create <= hard;
2. capacity: this group's unconsumed minResources fit in the cluster's allocatable minus what
   is held by bound pods and other Inqueue/Running groups of any namespace and by the waiting
   groups of its namespace ahead of it, *of at least this group's priority*. Lower-priority
   pods do not count, because the controller's gang preemption can take their place (unless
   the group's preemptionPolicy is Never).

A group's demand is counted once, whatever state its members are in. The built-in
ResourceQuota admission plugin charges a pod to status.used when the pod is *created*
(kubernetes plugin/pkg/admission/resourcequota), so for quota only the part of minResources
(and of minMember) its created, unfinished members do not already charge is new. A node holds
a pod only once it is bound, so for capacity only what its bound members do not already take
is new.

Order: groups are considered by priority, then creation time (first come, first served
within a priority, as kube-batch's enqueue action pops jobs from a priority queue ordered by
priority and creation time). Each namespace is a queue of its own: when a waiting group is
decided, the demand of the waiting groups *of its namespace* ahead of it counts as held, so a
younger group of lower or equal priority never takes what an older one of its namespace waits
for; another namespace's waiting group holds nothing, so one tenant's big waiting group does
not stall every other tenant's. Kueue draws the same line: even a StrictFIFO queue holds back
only its own workloads (kubernetes-sigs/kueue pkg/queue/cluster_queue_strict_fifo.go), and
across queues what fits goes in. A waiting group that could never fit (its demand alone
exceeds a quota's hard or the cluster's allocatable) and a group backing off after an Inqueue
timeout hold nothing, so neither blocks the queue behind it. An admitted group is not demoted
because a higher-priority one arrived later: groups behind it in time do not count in its
re-check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

from priogate.clock import epoch_seconds
from priogate.phase import INQUEUE_TIMEOUT, UNSCHEDULABLE, EnqueueVerdict
from priogate.podgroup import Phase
from priogate.quota import Consumer, Reservation, first_exceeded, format_amounts, quota_names
from priogate.quota import min_resources_of as min_resources_of  # re-exported: callers read it here
from priogate.resources import ResourceList, nano_units, subtract

ZERO = Fraction(0)
ENQUEUE_ORDERS = ("priority", "fcfs")
WAITING_PHASES = ("", Phase.PENDING)


def _positive(amounts: ResourceList) -> ResourceList:
    return {name: amount for name, amount in amounts.items() if amount > 0}


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
    consumed: ResourceList  # requests of its bound, unfinished members: what nodes hold already
    # Requests and count of its created, unfinished members, bound or not: what the
    # ResourceQuota plugin has already charged to status.used.
    charged: ResourceList = field(default_factory=dict)
    created_members: int = 0
    created_at: str = ""  # metadata.creationTimestamp (RFC 3339 UTC: sorts as text)
    backing_off: bool = False  # rolled back after an Inqueue timeout, not yet eligible again

    # Cached: every verdict reads these of every other unfinished group.
    @cached_property
    def unconsumed(self) -> ResourceList:
        """What it still needs from nodes."""
        return _positive(subtract(self.min_resources, self.consumed))

    @cached_property
    def quota_demand(self) -> ResourceList:
        """What it still adds to a quota's status.used, in a quota's resource names."""
        to_come = max(self.min_member - self.created_members, 0)
        return quota_names(_positive(subtract(self.min_resources, self.charged)), to_come)

    @cached_property
    def unconsumed_nanos(self) -> dict[str, int | Fraction]:
        return nano_units(self.unconsumed)

    @cached_property
    def quota_demand_nanos(self) -> dict[str, int | Fraction]:
        return nano_units(self.quota_demand)

    @cached_property
    def quota_shape(self) -> tuple[str, frozenset[tuple[str, int | Fraction]]]:
        """What a quota's verdict on its demand alone depends on: its class and quota demand."""
        return self.priority_class, frozenset(self.quota_demand_nanos.items())

    # --enqueue-order: "priority" (higher priority first, then older first) or "fcfs" (older
    # first, whatever the priority, as the Delay Pod Creation design words it).
    order_by: str = "priority"

    @cached_property
    def order(self) -> tuple[int, str, str]:
        """The enqueue order within the group's namespace (ENQUEUE_ORDERS)."""
        return (-self.priority if self.order_by == "priority" else 0, self.created_at, self.key)


@dataclass(frozen=True)
class BoundPod:
    priority: int
    requests: ResourceList

    @cached_property
    def requests_nanos(self) -> dict[str, int | Fraction]:
        return nano_units(self.requests)


def check_quota(
    group: GroupDemand, quotas: Sequence[Mapping[str, Any]], holders: Iterable[Reservation] = ()
) -> str | None:
    """The quota test alone, against `holders`: what the namespace's other holding groups and
    the waiting groups ahead of it reserve (priogate.enqueue_index works out which)."""
    demand = group.quota_demand
    found = first_exceeded(quotas, Consumer(group.priority_class), demand, holders, count_used=True)
    if found is None:
        return None
    # No used/reserved amounts in the text: they change with every pod, and the text goes into a
    # status condition, which would then be rewritten on every resync.
    return (
        f"quota {found.quota} insufficient: requested {format_amounts(found.over, demand)} on top of "
        f"what is used and reserved by other PodGroups, limited {format_amounts(found.over, found.hard)}"
    )


def capacity_problem(group: GroupDemand, short: Sequence[str], allocatable: ResourceList) -> str | None:
    """The capacity test's text for the resources (sorted) where the group's unconsumed
    minResources exceed what is free for it; None when none does."""
    if not short:
        return None
    return (
        f"cluster capacity insufficient: minResources {format_amounts(short, group.unconsumed)} exceed what "
        f"is not held by pods and PodGroups of priority >= {group.priority} and older waiting PodGroups of "
        f"its namespace (allocatable {format_amounts(short, allocatable)})"
    )


def before_the_view(group: GroupDemand) -> EnqueueVerdict | None:
    """The verdicts that need no view of the cluster."""
    if group.backing_off:
        return EnqueueVerdict(False, "backing off after an Inqueue timeout", INQUEUE_TIMEOUT)
    if not group.min_resources:
        return EnqueueVerdict(True, "no minResources")  # Volcano enqueues such groups at once
    return None


def never_fits_quota(group: GroupDemand, quotas: Sequence[Mapping[str, Any]]) -> bool:
    """Its demand alone exceeds a hard limit of one of its namespace's quotas that applies."""
    return (
        first_exceeded(quotas, Consumer(group.priority_class), group.quota_demand, [], count_used=False)
        is not None
    )


def inqueue_timed_out(stuck_since: float | None, now: float, timeout: float) -> bool:
    """An Inqueue group whose members the scheduler could not place, for which no preemption was
    possible, since `stuck_since` (None: not stuck). `timeout` <= 0 disables the rollback."""
    return timeout > 0 and stuck_since is not None and now - stuck_since >= timeout


def backing_off(status: Mapping[str, Any] | None, now: float, backoff: float) -> bool:
    """A group rolled back by an Inqueue timeout waits `backoff` seconds before it may be
    enqueued again, so it does not loop Pending -> Inqueue -> Pending."""
    return backoff > 0 and backed_off_until(rolled_back_at(status), now, backoff)


def backed_off_until(since: float | None, now: float, backoff: float) -> bool:
    """backing_off, from the rollback time (rolled_back_at)."""
    return backoff > 0 and since is not None and now - since < backoff


def rolled_back_at(status: Mapping[str, Any] | None) -> float | None:
    """When an Inqueue timeout rolled the group back: the Unschedulable condition's
    lastTransitionTime (it turned True then). None: never, or a time that cannot be read."""
    for condition in (status or {}).get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == UNSCHEDULABLE
            and condition.get("status") == "True"
            and condition.get("reason") == INQUEUE_TIMEOUT
        ):
            try:
                return epoch_seconds(str(condition.get("lastTransitionTime")))
            except ValueError:
                return None
    return None
