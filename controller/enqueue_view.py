"""What the controller's enqueue verdicts read, from the watch caches: every unfinished group's
demand, the bound pods by priority, the allocatable, each as a priogate.enqueue_index view.

Built once per generation of the caches it reads and reused by every verdict until one of them
changes. The pods' part (members by group, bound pods) is kept until the pods change: a
group's status write, the commonest change, does not walk every pod again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.caches import Caches
from priogate import enqueue
from priogate import priority as prio
from priogate.enqueue_index import HeldByPriority, Verdicts
from priogate.podgroup import FINISHED_PHASES, TERMINAL_POD_PHASES, group_of
from priogate.resources import ResourceList, add, parse_resource_list, pod_requests


def priority_of(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def requests_of(pod: Mapping[str, Any]) -> ResourceList:
    try:
        return pod_requests(pod)
    except ValueError:
        return {}  # admission refuses such pods; an old one must not stop every reconcile


def bound_active(pod: Mapping[str, Any]) -> bool:
    return (
        bool((pod.get("spec") or {}).get("nodeName"))
        and (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
    )


def active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES


def version(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(uid, resourceVersion): an object's content is the same while both are."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return uid, str(meta.get("resourceVersion") or "")


def allocatable_of(nodes: Iterable[Mapping[str, Any]]) -> ResourceList:
    total: ResourceList = {}
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        status = node.get("status") or {}
        try:
            total = add(total, parse_resource_list(status.get("allocatable") or status.get("capacity")))
        except ValueError:
            continue  # a node the scheduler cannot use either
    return total


@dataclass(frozen=True)
class _Pods:
    generation: int
    members: dict[tuple[str, str], list[Mapping[str, Any]]]  # by (namespace, group name)
    bound: list[enqueue.BoundPod]
    held: HeldByPriority


@dataclass(frozen=True)
class EnqueueInputs:
    key: tuple[int, int, int, int]  # the caches' generations it was built from
    allocatable: ResourceList
    bound: list[enqueue.BoundPod]
    groups: list[enqueue.GroupDemand]  # every unfinished group: holding or waiting
    verdicts: Verdicts


class EnqueueView:
    def __init__(self, caches: Caches, enqueue_backoff: float) -> None:
        self.caches = caches
        self.enqueue_backoff = enqueue_backoff
        self._view: EnqueueInputs | None = None
        self._pods: _Pods | None = None
        self._allocatable: tuple[int, ResourceList] | None = None
        # uid -> (resourceVersion, its BoundPod or None), and uid -> (what a group's demand was
        # computed from, the demand): the view's parts, kept across rebuilds
        self._bound_memo: dict[str, tuple[str, enqueue.BoundPod | None]] = {}
        self._demand_memo: dict[str, tuple[tuple[Any, ...], enqueue.GroupDemand]] = {}

    def _class_priority(self, class_name: str) -> tuple[int, bool] | None:
        """(value, may preempt) of a PriorityClass, read as admission reads it; None if unknown."""
        pc = self.caches.classes.get("", class_name)
        if pc is None:
            return None
        return prio.class_value(pc), prio.class_policy(pc) != prio.PREEMPT_NEVER

    def demand(self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> enqueue.GroupDemand:
        meta, spec = group["metadata"], group.get("spec") or {}
        class_name = spec.get("priorityClassName") or ""
        resolved = self._class_priority(class_name) if class_name else None
        if resolved is None:  # no class (or not found): the members' priority, as the engine does
            resolved = (max((priority_of(p) for p in members), default=0), True)
        created = [p for p in members if active(p)]
        consumed: ResourceList = {}
        charged: ResourceList = {}
        for pod in created:
            requests = requests_of(pod)
            charged = add(charged, requests)
            if bound_active(pod):
                consumed = add(consumed, requests)
        try:
            min_resources = enqueue.min_resources_of(spec.get("minResources"))
        except ValueError:
            min_resources = {}
        return enqueue.GroupDemand(
            key=f"{meta['namespace']}/{meta['name']}",
            namespace=meta["namespace"],
            priority_class=class_name,
            priority=resolved[0],
            preempts=resolved[1],
            phase=(group.get("status") or {}).get("phase") or "",
            min_member=int(spec.get("minMember") or 0),
            min_resources=min_resources,
            consumed=consumed,
            charged=charged,
            created_members=len(created),
            created_at=str(meta.get("creationTimestamp") or ""),
            backing_off=enqueue.backing_off(group.get("status"), time.time(), self.enqueue_backoff),
        )

    def _pods_part(self) -> _Pods:
        generation = self.caches.pods.generation
        if self._pods is not None and self._pods.generation == generation:
            return self._pods
        members: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        bound = []
        # Each pod's part is kept by object version and only what changed is computed again.
        bound_memo: dict[str, tuple[str, enqueue.BoundPod | None]] = {}
        for pod in self.caches.pods.items():
            name = group_of(pod)
            if name:
                members.setdefault((pod["metadata"].get("namespace", ""), name), []).append(pod)
            uid, pod_version = version(pod)
            known = self._bound_memo.get(uid)
            if known is None or known[0] != pod_version or not pod_version:  # no version: no key
                is_bound = bound_active(pod)
                known = (
                    pod_version,
                    enqueue.BoundPod(priority_of(pod), requests_of(pod)) if is_bound else None,
                )
            bound_memo[uid] = known
            if known[1] is not None:
                bound.append(known[1])
        self._bound_memo = bound_memo
        self._pods = _Pods(generation, members, bound, HeldByPriority.of_pods(bound))
        return self._pods

    def _allocatable_now(self) -> ResourceList:
        generation = self.caches.nodes.generation
        if self._allocatable is None or self._allocatable[0] != generation:
            self._allocatable = (generation, allocatable_of(self.caches.nodes.items()))
        return self._allocatable[1]

    def get(self) -> EnqueueInputs:
        """What every enqueue decision reads, reused until one of the caches it reads changes: a
        resync of G groups costs O(pods + groups) once, not per group."""
        key = (
            self.caches.pods.generation,
            self.caches.podgroups.generation,
            self.caches.nodes.generation,
            self.caches.quotas.generation,  # whether a waiting group's own quota refuses it
        )
        if self._view is not None and self._view.key == key:
            return self._view
        pods = self._pods_part()
        groups = []
        demand_memo: dict[str, tuple[tuple[Any, ...], enqueue.GroupDemand]] = {}
        for group in self.caches.podgroups.items():
            if ((group.get("status") or {}).get("phase") or "") not in FINISHED_PHASES:
                meta = group["metadata"]
                group_members = pods.members.get((meta["namespace"], meta["name"]), [])
                uid, group_version = version(group)
                memo_key = (
                    group_version,
                    tuple(version(p) for p in group_members),
                    self.caches.classes.generation,
                    self.caches.quotas.namespace_generation(meta["namespace"]),
                )
                known = self._demand_memo.get(uid)
                versioned = bool(group_version) and all(v for _, v in memo_key[1])  # else no key
                if known is None or known[0] != memo_key or not versioned:
                    known = (memo_key, self._waiting_demand(group, group_members))
                demand_memo[uid] = known
                demand = known[1]
                backing_off = enqueue.backing_off(group.get("status"), time.time(), self.enqueue_backoff)
                if demand.backing_off != backing_off:  # the one part that changes with time alone
                    demand = dataclasses.replace(demand, backing_off=backing_off)
                groups.append(demand)
        self._demand_memo = demand_memo
        allocatable = self._allocatable_now()
        verdicts = Verdicts(groups, pods.held, allocatable, self._quotas)
        self._view = EnqueueInputs(key, allocatable, pods.bound, groups, verdicts)
        return self._view

    def _quotas(self, namespace: str) -> list[Mapping[str, Any]]:
        return list(self.caches.quotas.namespace(namespace).values())

    def _waiting_demand(
        self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]]
    ) -> enqueue.GroupDemand:
        """The group's demand, and for a waiting group whether its own quota refuses it."""
        demand = self.demand(group, members)
        if demand.phase in enqueue.WAITING_PHASES and demand.min_resources:
            try:
                blocked = enqueue.check_quota(demand, self._quotas(demand.namespace)) is not None
            except ValueError:
                blocked = True  # a malformed quota holds it back (the verdict says so)
            demand = dataclasses.replace(demand, quota_blocked=blocked)
        return demand
