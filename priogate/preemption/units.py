"""Victim units for gang preemption, ranked once per cluster state.

A unit is what gang preemption takes or spares as one: a single pod, or a whole PodGroup
(its placed members). Units are ranked by importance, most important first (KEP-5710's
order): higher priority; a group before a single pod; between pods the older; between groups
the larger, then the older. A group is a unit only when every placed member may be a victim
(not a DaemonSet or mirror pod, not opted out in strict mode); otherwise no member of it is
ever taken, so a group is never left half-broken by a protected member.

Per node, the units' pods are kept in rank order with request prefix sums, so the free space
of a node at any point of the reprieve ("units ranked before r are back") is one bisect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from priogate.preemption.fit import Vector
from priogate.preemption.snapshot import PodGroupInfo, PodInfo
from priogate.preemption.state import ClusterState, importance_key

GROUP_PREFIX = "podgroup:"


@dataclass(frozen=True, slots=True)
class Unit:
    key: str  # the pod key, or "podgroup:ns/name"
    priority: int  # a group's is its most important member's: all must be below the preemptor
    group: PodGroupInfo | None
    pods: tuple[PodInfo, ...]  # most important first
    rank: int

    @property
    def surplus(self) -> int:
        """Members that can go while the group keeps minMember placed."""
        if self.group is None:
            return 0
        return len(self.pods) - self.group.min_member


@dataclass(frozen=True, slots=True)
class NodeUnits:
    ranks: tuple[int, ...]  # non-decreasing: one entry per unit pod on the node
    cum: tuple[Vector, ...]  # cum[i]: summed requests of entries[:i]


@dataclass(frozen=True, slots=True)
class UnitIndex:
    units: tuple[Unit, ...]  # by rank
    neg_priority: tuple[int, ...]  # ascending, for bisect
    per_node: Mapping[str, NodeUnits]
    pdb_ranks: tuple[int, ...]  # ranks of units with a pod some PDB counts
    opted_ranks: tuple[int, ...]  # ranks of units with an opted-out pod (soft mode only)
    rank_of: Mapping[str, int]  # unit key -> rank
    pdb_members: Mapping[int, tuple[tuple[int, PodInfo], ...]]  # PDB index -> (rank, pod) by rank


def _unit_order(unit: Unit) -> tuple:
    if unit.group is not None:
        return (-unit.priority, 0, -len(unit.pods), unit.group.created, unit.key)
    pod = unit.pods[0]
    return (-unit.priority, 1, 0, pod.start_time, unit.key)


def unit_index(state: ClusterState, *, include_opted_out: bool) -> UnitIndex:
    """The ranked units of `state`, computed once per state and variant."""
    memo_key = f"units:{include_opted_out}"
    cached = state.memo.get(memo_key)
    if cached is None:
        cached = _build(state, include_opted_out)
        state.memo[memo_key] = cached
    return cached


def _build(state: ClusterState, include_opted_out: bool) -> UnitIndex:
    def may_go(pod: PodInfo) -> bool:
        return not pod.protected and (include_opted_out or not pod.opted_out)

    members: dict[str, list[PodInfo]] = {}
    drafts: list[Unit] = []
    for pod in state.bound_pods():
        if pod.terminating:
            continue  # leaving anyway: free space, never a victim, not counted in its group
        if pod.group in state.groups:
            members.setdefault(pod.group, []).append(pod)
        elif may_go(pod):
            drafts.append(Unit(pod.key, pod.priority, None, (pod,), 0))
    for key, pods in members.items():
        if all(may_go(p) for p in pods):
            ordered = tuple(sorted(pods, key=importance_key))
            group = state.groups[key]
            drafts.append(Unit(GROUP_PREFIX + key, max(p.priority for p in pods), group, ordered, 0))
    drafts.sort(key=_unit_order)
    units = tuple(Unit(u.key, u.priority, u.group, u.pods, rank) for rank, u in enumerate(drafts))
    width = len(state.dims)
    entries: dict[str, list[tuple[int, Vector]]] = {}
    pdb_ranks, opted_ranks = [], []
    pdb_members: dict[int, list[tuple[int, PodInfo]]] = {}
    for unit in units:
        covered = False
        for pod in unit.pods:
            entries.setdefault(pod.node_name, []).append((unit.rank, state.vectors[pod.key]))
            for i in state.pdb_matches.get(pod.key, ()):
                pdb_members.setdefault(i, []).append((unit.rank, pod))
                covered = True
        if covered:
            pdb_ranks.append(unit.rank)
        if any(p.opted_out for p in unit.pods):
            opted_ranks.append(unit.rank)
    per_node = {node: _node_units(rows, width) for node, rows in entries.items()}
    return UnitIndex(
        units,
        tuple(-u.priority for u in units),
        per_node,
        tuple(pdb_ranks),
        tuple(opted_ranks),
        {u.key: u.rank for u in units},
        {i: tuple(members) for i, members in pdb_members.items()},
    )


def group_members(state: ClusterState) -> Mapping[str, frozenset[str]]:
    """PodGroup key -> keys of all its pods (pending and placed), once per state."""
    cached = state.memo.get("group_members")
    if cached is None:
        members: dict[str, set[str]] = {}
        for pod in state.pods.values():
            if pod.group:
                members.setdefault(pod.group, set()).add(pod.key)
        cached = {group: frozenset(keys) for group, keys in members.items()}
        state.memo["group_members"] = cached
    return cached


def _node_units(rows: list[tuple[int, Vector]], width: int) -> NodeUnits:
    running = [0] * width
    cum = [tuple(running)]
    for _, vec in rows:
        for d in range(width):
            running[d] += vec[d]
        cum.append(tuple(running))
    return NodeUnits(tuple(rank for rank, _ in rows), tuple(cum))
