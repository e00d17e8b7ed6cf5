"""What the controller's enqueue verdicts read, from the watch caches: every unfinished group's
demand, the bound pods' requests by priority, the allocatable, as a priogate.enqueue_index view.

Built once per generation of the caches it reads and reused by every verdict until one of them
changes. Then only what changed is read again: the caches replace a namespace's snapshot (and
each object) on every change, so a namespace whose snapshots of groups and pods are the same
objects is kept whole, and in one that changed, a group whose object and member list are the
same is not read again (its demand is also kept by resourceVersion, as before). A status write,
the commonest change, costs its namespace's groups in identity checks, not every group and pod.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.caches import Caches
from controller.pods_view import NamespacePods, bound_active, priority_of, requests_of, version
from priogate import enqueue
from priogate import priority as prio
from priogate.enqueue_index import Verdicts
from priogate.podgroup import FINISHED_PHASES, TERMINAL_POD_PHASES
from priogate.resources import ResourceList, add, parse_resource_list
from priogate.running_sums import HeldByPriority


def active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES


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
class _Bound:
    generation: int  # the pods cache's
    namespaces: list[NamespacePods]
    held: HeldByPriority


_NO_MEMBERS: list[Mapping[str, Any]] = []  # one list, never changed: the same object each time

# A group as last read: its object and member list, its demand (None: finished), when an Inqueue
# timeout rolled it back, and whether both had versions (else it is read again every time).
_Entry = tuple[Mapping[str, Any], list[Mapping[str, Any]], enqueue.GroupDemand | None, float | None, bool]


@dataclass(frozen=True)
class _Namespace:
    """A namespace's unfinished groups' demands, valid while the namespace's snapshots of
    groups and pods (the caches replace them on every change) and the classes are."""

    groups_seen: Mapping[str, Any]
    pods_seen: Mapping[str, Any]
    classes_generation: int  # a demand's priority is its class's
    demands: list[enqueue.GroupDemand]
    rolled_back: list[tuple[int, float]]  # (position, time) of those an Inqueue timeout rolled back
    same: dict[str, _Entry]  # by group name: reused while the group and member list are the same


@dataclass(frozen=True)
class EnqueueInputs:
    key: tuple[int, int, int, int]  # the caches' generations it was built from
    allocatable: ResourceList
    pods: list[NamespacePods]
    namespaces: dict[str, list[enqueue.GroupDemand]]  # every unfinished group: holding or waiting
    verdicts: Verdicts

    @property
    def bound(self) -> list[enqueue.BoundPod]:
        return [pod for namespace in self.pods for pod in namespace.bound]

    @property
    def groups(self) -> list[enqueue.GroupDemand]:
        return [group for groups in self.namespaces.values() for group in groups]


class EnqueueView:
    def __init__(self, caches: Caches, enqueue_backoff: float, order_by: str = "priority") -> None:
        self.caches = caches
        self.enqueue_backoff = enqueue_backoff
        self.order_by = order_by  # --enqueue-order
        self._view: EnqueueInputs | None = None
        self._bound: _Bound | None = None
        self._allocatable: tuple[int, ResourceList] | None = None
        # Kept across views, each while what it was computed from is the same: by namespace, the
        # members of each group (from the pods snapshot), the quotas (from the quotas snapshot),
        # the groups' demands and the last view's lists of them (backing_off as of then); by uid,
        # each pod's BoundPod and each group's demand, by resourceVersion.
        self._pods_in: dict[str, NamespacePods] = {}
        self._quotas: dict[str, tuple[Mapping[str, Any], list[Mapping[str, Any]]]] = {}
        self._namespaces: dict[str, _Namespace] = {}
        self._lists: dict[str, tuple[_Namespace, tuple[bool, ...], list[enqueue.GroupDemand]]] = {}
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
            order_by=self.order_by,
        )

    def members(self, namespace: str) -> dict[str, list[Mapping[str, Any]]]:
        """The namespace's pods by PodGroup name, in the cache's order."""
        return self._pods_of(namespace, self.caches.pods.namespace(namespace)).members

    def _pods_of(self, namespace: str, seen: Mapping[str, Mapping[str, Any]]) -> NamespacePods:
        known = NamespacePods.read(seen, self._pods_in.get(namespace))
        self._pods_in[namespace] = known
        return known

    def quotas(self, namespace: str) -> list[Mapping[str, Any]]:
        """The namespace's ResourceQuotas: the same list while they are the same."""
        quotas = self.caches.quotas.namespace(namespace)
        known = self._quotas.get(namespace)
        if known is None or known[0] is not quotas:
            known = (quotas, list(quotas.values()))
            self._quotas[namespace] = known
        return known[1]

    def _bound_pods(self) -> _Bound:
        generation = self.caches.pods.generation
        if self._bound is not None and self._bound.generation == generation:
            return self._bound
        # By namespace, each moved by the pods that changed (controller/pods_view.py).
        parts = {
            ns: self._pods_of(ns, self.caches.pods.namespace(ns)) for ns in self.caches.pods.namespaces()
        }
        for gone in self._pods_in.keys() - parts.keys():
            del self._pods_in[gone]
        held = HeldByPriority(item for part in parts.values() for item in part.per_priority.items())
        self._bound = _Bound(generation, list(parts.values()), held)
        return self._bound

    def _allocatable_now(self) -> ResourceList:
        generation = self.caches.nodes.generation
        if self._allocatable is None or self._allocatable[0] != generation:
            self._allocatable = (generation, allocatable_of(self.caches.nodes.items()))
        return self._allocatable[1]

    def get(self) -> EnqueueInputs:
        """What every enqueue decision reads, reused until one of the caches it reads changes;
        then only the namespaces that changed are read again."""
        key = (
            self.caches.pods.generation,
            self.caches.podgroups.generation,
            self.caches.nodes.generation,
            self.caches.quotas.generation,  # the quotas the verdicts test
        )
        if self._view is not None and self._view.key == key:
            return self._view
        bound = self._bound_pods()
        now = time.time()
        namespaces: dict[str, list[enqueue.GroupDemand]] = {}
        lists: dict[str, tuple[_Namespace, tuple[bool, ...], list[enqueue.GroupDemand]]] = {}
        for namespace in self.caches.podgroups.namespaces():
            part = self._namespace(namespace)
            # backing_off is the one part that changes with time alone.
            backing_off = tuple(
                enqueue.backed_off_until(t, now, self.enqueue_backoff) for _, t in part.rolled_back
            )
            last = self._lists.get(namespace)
            if last is not None and last[0] is part and last[1] == backing_off:
                groups = last[2]  # the same list: the verdicts reuse what they built from it
            else:
                groups = list(part.demands)
                for (i, _), now_backing_off in zip(part.rolled_back, backing_off, strict=True):
                    if groups[i].backing_off != now_backing_off:
                        groups[i] = dataclasses.replace(groups[i], backing_off=now_backing_off)
            lists[namespace] = (part, backing_off, groups)
            if groups:
                namespaces[namespace] = groups
        self._lists = lists
        for table in (self._namespaces, self._quotas):
            for gone in set(table) - set(lists):
                table.pop(gone, None)
        if len(self._demand_memo) > 2 * sum(len(p.groups_seen) for p in self._namespaces.values()) + 64:
            live = {version(g)[0] for p in self._namespaces.values() for g in p.groups_seen.values()}
            self._demand_memo = {uid: d for uid, d in self._demand_memo.items() if uid in live}
        allocatable = self._allocatable_now()
        previous = self._view.verdicts if self._view is not None else None
        verdicts = Verdicts(namespaces, bound.held, allocatable, self.quotas, previous)
        self._view = EnqueueInputs(key, allocatable, bound.namespaces, namespaces, verdicts)
        return self._view

    def _namespace(self, namespace: str) -> _Namespace:
        groups_seen = self.caches.podgroups.namespace(namespace)
        pods_seen = self.caches.pods.namespace(namespace)
        classes_generation = self.caches.classes.generation
        known = self._namespaces.get(namespace)
        if (
            known is not None
            and known.groups_seen is groups_seen
            and known.pods_seen is pods_seen
            and known.classes_generation == classes_generation
        ):
            return known
        members = self._pods_of(namespace, pods_seen).members
        # The last build's entries: a group whose object and member list are the very ones seen
        # then (the caches replace an object on every change) is not read again.
        last = known.same if known is not None and known.classes_generation == classes_generation else {}
        demands, rolled_back, same = [], [], {}
        for name, group in groups_seen.items():
            group_members = members.get(name, _NO_MEMBERS)
            entry = last.get(name)
            if entry is None or entry[0] is not group or entry[1] is not group_members:
                entry = self._group_entry(group, group_members, classes_generation)
            if entry[2] is None:
                continue  # finished
            if entry[4]:
                same[name] = entry
            if entry[3] is not None:
                rolled_back.append((len(demands), entry[3]))
            demands.append(entry[2])
        known = _Namespace(groups_seen, pods_seen, classes_generation, demands, rolled_back, same)
        self._namespaces[namespace] = known
        return known

    def _group_entry(
        self, group: Mapping[str, Any], members: list[Mapping[str, Any]], classes_generation: int
    ) -> _Entry:
        status = group.get("status") or {}
        if (status.get("phase") or "") in FINISHED_PHASES:
            return (group, members, None, None, True)
        uid, group_version = version(group)
        memo_key = (group_version, tuple(version(p) for p in members), classes_generation)
        known = self._demand_memo.get(uid)
        versioned = bool(group_version) and all(v for _, v in memo_key[1])  # else no key
        if known is None or known[0] != memo_key or not versioned:
            known = (memo_key, self.demand(group, members))
            self._demand_memo[uid] = known
        since = enqueue.rolled_back_at(status) if self.enqueue_backoff > 0 else None
        return (group, members, known[1], since, versioned)
