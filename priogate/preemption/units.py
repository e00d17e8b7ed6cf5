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

from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter

from priogate.preemption.fit import Vector
from priogate.preemption.records import PodGroupInfo, PodInfo
from priogate.preemption.state import ClusterState, importance_key, occupies

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


# Ranks are spaced so a live state can insert a unit without renumbering the others. New
# pods mostly land at one spot (the end of their priority band: the latest start), so an
# insert takes a small step from its predecessor rather than halving the gap: a band takes
# RANK_GAP / RANK_STEP such inserts before gaps start to halve, and only an exhausted gap
# makes the index be built afresh. Python ints: the size costs nothing.
RANK_GAP = 2**32
RANK_STEP = 2**16


@dataclass(slots=True)
class UnitIndex:
    """Units in rank order. Ranks only order units: they increase along `units` but are
    spaced (RANK_GAP apart when built), so `patch_unit_index` can insert a unit between two
    others and leave every other rank, and so every other node's rows, as they are."""

    units: list[Unit]  # by rank
    orders: list[tuple]  # _unit_order of each unit, aligned with `units`
    ranks: list[int]  # ascending, aligned with `units`
    neg_priority: list[int]  # ascending, aligned with `units`, for bisect
    unit_at: dict[int, Unit]  # rank -> unit
    per_node: dict[str, NodeUnits]
    by_last: list[tuple[int, str]]  # (rank of the node's least important entry, node), ascending
    pdb_ranks: list[int]  # ranks of units with a pod some PDB counts, ascending
    opted_ranks: list[int]  # ranks of units with an opted-out pod (soft mode only), ascending
    rank_of: dict[str, int]  # unit key -> rank
    unit_of_pod: dict[str, str]  # pod key -> its unit's key
    pdb_members: dict[int, list[tuple[int, PodInfo]]]  # PDB index -> (rank, pod) by rank
    pdbs_of_rank: dict[int, set[int]]  # rank -> the PDB indices whose members list it
    stride: int  # above every rank, and above `first_below` of any priority

    def first_below(self, priority: int) -> int:
        """The rank of the first unit with priority below `priority` (stride - 1: none)."""
        i = bisect_right(self.neg_priority, -priority)
        return self.ranks[i] if i < len(self.ranks) else self.stride - 1

    def from_rank(self, rank: int) -> list[Unit]:
        """The units ranked at or after `rank`, in rank order."""
        return self.units[bisect_left(self.ranks, rank) :]


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


def _may_go(pod: PodInfo, include_opted_out: bool) -> bool:
    return not pod.protected and (include_opted_out or not pod.opted_out)


def _group_unit(state: ClusterState, key: str, pods: list[PodInfo], include_opted_out: bool) -> Unit | None:
    """The unit of a PodGroup's placed, not terminating members: none unless every one may go."""
    if not pods or not all(_may_go(p, include_opted_out) for p in pods):
        return None
    ordered = tuple(sorted(pods, key=importance_key))
    return Unit(GROUP_PREFIX + key, max(p.priority for p in pods), state.groups[key], ordered, 0)


def _build(state: ClusterState, include_opted_out: bool) -> UnitIndex:
    members: dict[str, list[PodInfo]] = {}
    drafts: list[Unit] = []
    for pod in state.bound_pods():
        if pod.terminating:
            continue  # leaving anyway: free space, never a victim, not counted in its group
        if pod.group in state.groups:
            members.setdefault(pod.group, []).append(pod)
        elif _may_go(pod, include_opted_out):
            drafts.append(Unit(pod.key, pod.priority, None, (pod,), 0))
    for key, pods in members.items():
        unit = _group_unit(state, key, pods, include_opted_out)
        if unit is not None:
            drafts.append(unit)
    orders = sorted((_unit_order(u), u) for u in drafts)
    units = [Unit(u.key, u.priority, u.group, u.pods, (i + 1) * RANK_GAP) for i, (_, u) in enumerate(orders)]
    index = UnitIndex(
        units=units,
        orders=[order for order, _ in orders],
        ranks=[u.rank for u in units],
        neg_priority=[-u.priority for u in units],
        unit_at={u.rank: u for u in units},
        per_node={},
        by_last=[],
        pdb_ranks=[],
        opted_ranks=[],
        rank_of={u.key: u.rank for u in units},
        unit_of_pod={p.key: u.key for u in units for p in u.pods},
        pdb_members={},
        pdbs_of_rank={},
        stride=(len(units) + 2) * RANK_GAP,
    )
    width = len(state.dims)
    entries: dict[str, list[tuple[int, Vector]]] = {}
    for unit in units:
        for pod in unit.pods:
            entries.setdefault(pod.node_name, []).append((unit.rank, state.vectors[pod.key]))
        _index_extras(index, state, unit)
    index.per_node = {node: _node_units(rows, width) for node, rows in entries.items()}
    index.by_last = sorted((rows.ranks[-1], node) for node, rows in index.per_node.items())
    return index


def _index_extras(index: UnitIndex, state: ClusterState, unit: Unit) -> None:
    """The unit's entries in the PDB and opt-out lists (appended: callers keep them sorted)."""
    pdbs: set[int] = set()
    for pod in unit.pods:
        for i in state.pdb_matches.get(pod.key, ()):
            index.pdb_members.setdefault(i, []).append((unit.rank, pod))
            pdbs.add(i)
    if pdbs:
        index.pdb_ranks.append(unit.rank)
        index.pdbs_of_rank[unit.rank] = pdbs
    if any(p.opted_out for p in unit.pods):
        index.opted_ranks.append(unit.rank)


def patch_unit_index(
    index: UnitIndex,
    state: ClusterState,
    pods: set[str],
    groups: set[str],
    *,
    include_opted_out: bool,
) -> UnitIndex | None:
    """`index` updated in place for `state`, which differs from the state it was built for
    only in the placed pods `pods` (added, removed, changed, PDB matches moved) and the
    PodGroups `groups`; None when a rank gap ran out (build afresh then). The units those
    touch are taken out and put back where their order puts them; only their nodes' rows
    are recomputed. Used by the live state, whose previous state is discarded."""
    affected: set[str] = set()
    members = group_members(state)
    for key in pods:
        old = index.unit_of_pod.get(key)
        if old is not None:
            affected.add(old)
        pod = state.pods.get(key)
        if pod is not None and pod.group in state.groups:
            affected.add(GROUP_PREFIX + pod.group)
        else:
            affected.add(key)
    for group in groups:
        affected.add(GROUP_PREFIX + group)
        affected.update(members.get(group, ()))
        old_unit = index.rank_of.get(GROUP_PREFIX + group)
        if old_unit is not None:
            affected.update(p.key for p in index.unit_at[old_unit].pods)
    touched: dict[str, list[tuple[int, Vector]]] = {}
    removed: set[int] = set()
    for key in affected:
        rank = index.rank_of.pop(key, None)
        if rank is None:
            continue
        unit = index.unit_at.pop(rank)
        removed.add(rank)
        i = bisect_left(index.ranks, rank)
        del index.units[i], index.orders[i], index.ranks[i], index.neg_priority[i]
        for pod in unit.pods:
            if index.unit_of_pod.get(pod.key) == key:
                del index.unit_of_pod[pod.key]
            touched.setdefault(pod.node_name, [])
        for pdb in index.pdbs_of_rank.pop(rank, ()):
            kept = [entry for entry in index.pdb_members[pdb] if entry[0] != rank]
            if kept:
                index.pdb_members[pdb] = kept
            else:
                del index.pdb_members[pdb]
        _remove(index.pdb_ranks, rank)
        _remove(index.opted_ranks, rank)
    for key in sorted(affected):
        unit = _current_unit(state, key, include_opted_out)
        if unit is None:
            continue
        order = _unit_order(unit)
        i = bisect_left(index.orders, order)
        low = index.ranks[i - 1] if i > 0 else 0
        high = index.ranks[i] if i < len(index.ranks) else low + 2 * RANK_GAP
        if high - low < 2:
            return None
        rank = low + min(RANK_STEP, (high - low) // 2)
        unit = Unit(unit.key, unit.priority, unit.group, unit.pods, rank)
        index.units.insert(i, unit)
        index.orders.insert(i, order)
        index.ranks.insert(i, rank)
        index.neg_priority.insert(i, -unit.priority)
        index.unit_at[rank] = unit
        index.rank_of[unit.key] = rank
        index.stride = max(index.stride, rank + 2 * RANK_GAP)
        for pod in unit.pods:
            index.unit_of_pod[pod.key] = unit.key
            touched.setdefault(pod.node_name, []).append((rank, state.vectors[pod.key]))
        pdb_count, opted_count = len(index.pdb_ranks), len(index.opted_ranks)
        _index_extras(index, state, unit)
        if len(index.pdb_ranks) != pdb_count:
            index.pdb_ranks.sort()
            for pdb in index.pdbs_of_rank[rank]:
                index.pdb_members[pdb].sort(key=itemgetter(0))
        if len(index.opted_ranks) != opted_count:
            index.opted_ranks.sort()
    width = len(state.dims)
    for node, added in touched.items():
        old_rows = index.per_node.get(node)
        if old_rows:
            del index.by_last[bisect_left(index.by_last, (old_rows.ranks[-1], node))]
        rows = [row for row in _rows(old_rows) if row[0] not in removed] if old_rows else []
        rows = sorted(rows + added, key=itemgetter(0))
        if rows:
            index.per_node[node] = _node_units(rows, width)
            insort(index.by_last, (rows[-1][0], node))
        else:
            index.per_node.pop(node, None)
    return index


def _current_unit(state: ClusterState, key: str, include_opted_out: bool) -> Unit | None:
    """The unit `key` names in `state`, as _build would make it, or None."""
    if key.startswith(GROUP_PREFIX):
        group = key[len(GROUP_PREFIX) :]
        if group not in state.groups:
            return None
        placed = [
            pod
            for pod in (state.pods[k] for k in group_members(state).get(group, ()))
            if occupies(pod, state.nodes) and not pod.terminating
        ]
        return _group_unit(state, group, placed, include_opted_out)
    pod = state.pods.get(key)
    if (
        pod is None
        or not occupies(pod, state.nodes)
        or pod.terminating
        or pod.group in state.groups
        or not _may_go(pod, include_opted_out)
    ):
        return None
    return Unit(pod.key, pod.priority, None, (pod,), 0)


def _rows(units: NodeUnits) -> list[tuple[int, Vector]]:
    cum = units.cum
    return [
        (rank, tuple(b - a for a, b in zip(cum[i], cum[i + 1], strict=True)))
        for i, rank in enumerate(units.ranks)
    ]


def _remove(ranks: list[int], rank: int) -> None:
    i = bisect_left(ranks, rank)
    if i < len(ranks) and ranks[i] == rank:
        del ranks[i]


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
