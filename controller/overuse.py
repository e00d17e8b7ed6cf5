"""--evict-overused: a waiting PodGroup held back only by capacity that other groups of its
namespace hold beyond their minimum gets that surplus back (priogate.overuse decides which
members; docs/controller.md, "Overused PodGroups").

Every eviction goes through the Eviction API (controller/victims.py VictimWriter.evict), with
the member's uid as a precondition:
- a PodDisruptionBudget that does not allow it answers 429: the member is left alone, passed
  over for 30 s, and the next reconcile chooses among the others (a
  Warning Event on the waiting group says so, once per member and refusal);
- kube-apiserver writes the DisruptionTarget condition itself (reason EvictionByEvictionAPI,
  pkg/registry/core/pod/storage/eviction.go) and only when it evicts, so no condition claims a
  disruption a PDB then refused;
- 404 and a failed uid precondition (409) mean the member is gone or replaced: nothing to do.
Each evicted member gets a Warning Event `Evicted` naming the waiting group; the overused group
and the waiting group get an Event `EvictedOverused` naming the members.

Members evicted a moment ago count as leaving until the cache shows them terminating or gone,
so a reconcile that runs before the cache catches up does not evict more of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from controller.caches import Caches
from controller.events import EventRecorder, Once
from controller.pods_view import bound_active, priority_of, requests_of
from controller.victims import NotLeader, Preemptor, Taken, VictimWriter
from priogate import overuse
from priogate.enqueue import GroupDemand
from priogate.enqueue_index import Verdicts
from priogate.kube.client import ApiClient
from priogate.podgroup import GROUP_VERSION, Phase
from priogate.preemption_record import Victim, opt_out_label
from priogate.resources import ResourceList, add

log = structlog.get_logger("priogate.controller.overuse")

LEAVING_SECONDS = 60.0  # how long an evicted member counts as leaving if the cache never says so
BLOCKED_SECONDS = 30.0  # how long a member a PDB protected is passed over

Members = Mapping[str, Sequence[Mapping[str, Any]]]


def _opted_out(pod: Mapping[str, Any]) -> bool:
    return bool(opt_out_label((pod.get("metadata") or {}).get("labels")))


def member_of(pod: Mapping[str, Any], opt_out_mode: str) -> overuse.Member:
    meta = pod.get("metadata") or {}
    opted_out = _opted_out(pod)
    return overuse.Member(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        priority=priority_of(pod),
        created_at=str(meta.get("creationTimestamp") or ""),
        requests=requests_of(pod),
        protected=opted_out and opt_out_mode == "hard",
        last_resort=opted_out and opt_out_mode == "soft",
    )


def counted(pod: Mapping[str, Any]) -> bool:
    """Bound, unfinished and not terminating: a member that holds its place."""
    return bound_active(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


class OverusedEvictor:
    def __init__(
        self,
        client: ApiClient,
        caches: Caches,
        events: EventRecorder,
        is_leader: Callable[[], bool],
        *,
        opt_out_mode: str = "hard",
        blocked_seconds: float = BLOCKED_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.caches = caches
        self.events = events
        self.is_leader = is_leader
        self.opt_out_mode = opt_out_mode
        self.blocked_seconds = blocked_seconds
        self.clock = clock
        self.writer = VictimWriter(client, caches.pods.get, events, self._guard)
        self._evicted: dict[
            str, tuple[float, str, str, ResourceList]
        ] = {}  # uid -> (when, ns, name, requests)
        self._blocked: dict[str, float] = {}  # uid -> passed over until
        self._told = Once()  # (group uid, pod) told by _tell_blocked

    def _guard(self) -> None:
        if not self.is_leader():
            raise NotLeader("leadership lost during an overused-group eviction")

    def handle(
        self,
        group: Mapping[str, Any],
        demand: GroupDemand,
        verdicts: Verdicts,
        members: Members,
        demand_of: Callable[[Mapping[str, Any]], GroupDemand],
    ) -> list[str]:
        """For the waiting `group`: evict the surplus that lets it in, if any does. `members`:
        its namespace's members by group name; `demand_of(other)`: another group's demand (its
        priority). Returns the names of the members evicted."""
        if not demand.preempts:
            return []  # preemptionPolicy Never: it takes no one's place
        try:
            shortfall = verdicts.shortfall(demand)
        except ValueError:
            return []  # a malformed quota: the verdict says so
        if not shortfall:
            return []
        namespace = demand.namespace
        name = group["metadata"]["name"]
        now = self.clock()
        self._forget(now)
        groups = []
        for other_name, other in self.caches.podgroups.namespace(namespace).items():
            status = other.get("status") or {}
            if other_name == name or status.get("phase") != Phase.RUNNING:
                continue
            if (other.get("metadata") or {}).get("deletionTimestamp"):
                continue
            pods = [p for p in members.get(other_name, ()) if counted(p)]
            other_demand = demand_of(other)
            spare = overuse.surplus(
                [member_of(p, self.opt_out_mode) for p in pods],
                other_demand.min_member,
                other_demand.min_resources,
            )
            usable = [m for m in spare if m.uid not in self._blocked and m.uid not in self._evicted]
            groups.append((other_name, other_demand.priority, usable))
        found = overuse.candidates(demand.priority, groups)
        chosen = overuse.choose(shortfall, self._leaving(namespace, demand.priority), found)
        if not chosen:
            return []
        return self._evict(group, chosen, shortfall)

    def _leaving(self, namespace: str, at_least: int) -> ResourceList:
        """What the namespace's terminating bound pods, and members just evicted, will free of
        what counts against a group of priority `at_least`."""
        total: ResourceList = {}
        for pod in self.caches.pods.namespace(namespace).values():
            meta = pod.get("metadata") or {}
            if bound_active(pod) and meta.get("deletionTimestamp") and priority_of(pod) >= at_least:
                total = add(total, requests_of(pod))
        for _, ns, _, requests in self._evicted.values():
            if ns == namespace:
                total = add(total, requests)
        return total

    def _forget(self, now: float) -> None:
        """Evicted members the cache shows terminating or gone (or that waited too long) stop
        counting here: the cache counts them now. PDB refusals expire."""
        for uid, (when, namespace, name, _) in list(self._evicted.items()):
            pod = self.caches.pods.get(namespace, name)
            meta = (pod or {}).get("metadata") or {}
            if meta.get("uid") != uid or meta.get("deletionTimestamp") or now - when > LEAVING_SECONDS:
                del self._evicted[uid]
        for uid, until in list(self._blocked.items()):
            if now >= until:
                del self._blocked[uid]

    def _evict(
        self, group: Mapping[str, Any], chosen: Sequence[overuse.Candidate], shortfall: ResourceList
    ) -> list[str]:
        meta = group["metadata"]
        namespace, waiting = meta["namespace"], meta["name"]
        by = Preemptor(
            "PodGroup",
            GROUP_VERSION,
            group,
            f"evicted by priogate: a surplus member of an overused PodGroup (beyond its minMember and "
            f"minResources), for PodGroup {namespace}/{waiting}, which waits for that capacity",
            event_type="Warning",
            victim_reason="Evicted",
            victim_action="EvictOverused",
        )
        evicted: dict[str, list[str]] = {}
        for candidate in chosen:
            member = candidate.member
            victim = Victim(namespace, member.name, member.uid, "")
            taken = self.writer.evict(victim, by)
            if taken is Taken.BLOCKED:
                # Passed over for a while; the next reconcile chooses among the others.
                self._blocked[member.uid] = self.clock() + self.blocked_seconds
                self._tell_blocked(group, member.name, candidate.group)
                break  # the rest were chosen with it: choose again without it
            if taken is Taken.DELETED:
                self._evicted[member.uid] = (self.clock(), namespace, member.name, member.requests)
                evicted.setdefault(candidate.group, []).append(member.name)
        names = [n for pods in evicted.values() for n in pods]
        if not names:
            return []
        wanted = ", ".join(f"{n}={v}" for n, v in sorted(shortfall.items()))
        log.info(
            "evicted surplus members of overused PodGroups", podgroup=f"{namespace}/{waiting}", pods=names
        )
        self.events.emit(
            group,
            "PodGroup",
            GROUP_VERSION,
            type_="Normal",
            reason="EvictedOverused",
            action="EvictOverused",
            note=f"evicted surplus members of overused PodGroups of its namespace to free what it lacks "
            f"({wanted}): {', '.join(names)}",
        )
        for other_name, pods in evicted.items():
            other = self.caches.podgroups.get(namespace, other_name)
            if other is None:
                continue
            self.events.emit(
                other,
                "PodGroup",
                GROUP_VERSION,
                type_="Warning",
                reason="EvictedOverused",
                action="EvictOverused",
                note=f"evicted {', '.join(pods)}: members beyond its minMember and minResources, for "
                f"PodGroup {namespace}/{waiting}, which waits for that capacity; the group keeps its minimum",
            )
        return names

    def _tell_blocked(self, group: Mapping[str, Any], pod: str, other: str) -> None:
        if not self._told.first(group, pod):
            return
        self.events.emit(
            group,
            "PodGroup",
            GROUP_VERSION,
            type_="Warning",
            reason="EvictionBlocked",
            action="EvictOverused",
            note=f"a PodDisruptionBudget does not allow evicting {pod}, a surplus member of PodGroup "
            f"{other}: passed over for {self.blocked_seconds:g}s, other surplus members are chosen instead",
        )
