"""Per-node aggregates as columns, so one decision screens every node with a few passes of
C-level arithmetic over contiguous arrays instead of a Python loop over node objects.

For each resource dimension: the node's free space, its largest possible victim, and for
each priority level that possible victims have in the cluster, how much removing every
possible victim below that level would free. For a preemptor of priority P the relevant
level is found once (a bisect over the cluster's levels), not per node. Columns for the c
least important possible victims of each node (c <= PIVOTS) feed the lower bounds.

Built once per cluster state (and per opt-out variant) and patched, not rebuilt, after a
decision changes a few nodes. Screening then reads memory in order, which keeps the cost
per node flat as the cluster grows.
"""

from __future__ import annotations

import copy
import math
from array import array
from bisect import bisect_left, bisect_right

from priogate.preemption.state import ClusterState, NodeState, Ranked

MAX_LEVELS = 64  # more distinct victim priorities than this: cuts are computed on demand
PIVOTS = 4  # lower-bound columns for up to this many victims per node


def _zeros(typecode: str, count: int) -> array:
    return array(typecode, bytes(8 * count))


def _copy(columns: tuple[array, ...]) -> tuple[array, ...]:
    return tuple(array(c.typecode, c) for c in columns)


class ScreenTable:
    def __init__(self, state: ClusterState, include_opted_out: bool) -> None:
        self.include_opted_out = include_opted_out
        self.names = state.node_names
        self.name_set = frozenset(self.names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.nodes: list[NodeState] = [state.nodes[name] for name in self.names]
        self.ranked: list[Ranked] = [self._ranked(n) for n in self.nodes]
        count = len(self.names)
        self.width = width = len(state.dims)
        self.free = tuple(array("q", (n.free[d] for n in self.nodes)) for d in range(width))
        self.largest = tuple(array("q", (r.largest[d] for r in self.ranked)) for d in range(width))
        self.restricted = frozenset(
            i for i, n in enumerate(self.nodes) if n.info.taints or n.info.unschedulable
        )
        self.leaving_set = frozenset(i for i, n in enumerate(self.nodes) if n.terminating.pods)
        # pivot_*[c - 1][i]: about the c-th least important possible victim of node i
        self.pivot_priority = tuple(_zeros("q", count) for _ in range(PIVOTS))
        self.pivot_start = tuple(_zeros("d", count) for _ in range(PIVOTS))
        self.tail_priority = tuple(_zeros("q", count) for _ in range(PIVOTS))
        for i in range(count):
            self._fill_pivots(i)
        self.levels = tuple(sorted({p.priority for r in self.ranked for p in r.pods}))
        self._cuts: dict[int, tuple[array, ...]] = {}
        if len(self.levels) <= MAX_LEVELS:
            for k in range(len(self.levels) + 1):
                self._cuts[k] = self._cut_at(k)

    @property
    def leaving(self) -> list[int]:
        """Nodes with terminating pods."""
        return sorted(self.leaving_set)

    def removable(self, priority: int) -> tuple[array, ...]:
        """Per dimension, per node: the requests of every possible victim below `priority`."""
        k = bisect_left(self.levels, priority)  # levels below the preemptor
        cut = self._cuts.get(k)
        if cut is None:
            cut = self._cuts[k] = self._cut_at(k)
        return cut

    def patched(self, state: ClusterState, touched: set[str]) -> ScreenTable:
        """This table for `state`, which differs from the table's own only on `touched`
        nodes: columns are copied and those nodes' entries recomputed. A new victim priority
        level, another set of nodes or other resource dimensions mean a full rebuild."""
        if state.node_names != self.names or len(state.dims) != self.width:
            return ScreenTable(state, self.include_opted_out)
        levels = set(self.levels)
        if any(p.priority not in levels for name in touched for p in self._ranked(state.nodes[name]).pods):
            return ScreenTable(state, self.include_opted_out)
        if not touched:
            return self  # nothing to recompute (a table never changes once built)
        new = copy.copy(self)
        new.nodes, new.ranked = list(self.nodes), list(self.ranked)
        new.free, new.largest = _copy(self.free), _copy(self.largest)
        new.pivot_priority, new.pivot_start = _copy(self.pivot_priority), _copy(self.pivot_start)
        new.tail_priority = _copy(self.tail_priority)
        new._cuts = {k: _copy(cut) for k, cut in self._cuts.items()}
        leaving, restricted = set(self.leaving_set), set(self.restricted)
        for name in touched:
            i = self.index[name]
            node = state.nodes[name]
            new.nodes[i], new.ranked[i] = node, new._ranked(node)
            for d in range(self.width):
                new.free[d][i], new.largest[d][i] = node.free[d], new.ranked[i].largest[d]
            new._fill_pivots(i)
            for k, cut in new._cuts.items():
                new._fill_cut(cut, k, i)
            if node.terminating.pods:
                leaving.add(i)
            else:
                leaving.discard(i)
            # A watched node may gain or lose taints or cordoning (a decision never does).
            if node.info.taints or node.info.unschedulable:
                restricted.add(i)
            else:
                restricted.discard(i)
        new.leaving_set = frozenset(leaving)
        new.restricted = frozenset(restricted)
        return new

    def _ranked(self, node: NodeState) -> Ranked:
        return node.victims_all if self.include_opted_out else node.victims_strict

    def _fill_pivots(self, i: int) -> None:
        ranked = self.ranked[i]
        for c in range(1, PIVOTS + 1):
            has = len(ranked) >= c
            self.pivot_priority[c - 1][i] = ranked.pods[-c].priority if has else 0
            self.pivot_start[c - 1][i] = ranked.pods[-c].start_time if has else math.inf
            self.tail_priority[c - 1][i] = ranked.priority_tail[len(ranked) - c] if has else 0

    def _cut_at(self, k: int) -> tuple[array, ...]:
        columns = tuple(_zeros("q", len(self.names)) for _ in range(self.width))
        for i in range(len(self.names)):
            self._fill_cut(columns, k, i)
        return columns

    def _fill_cut(self, columns: tuple[array, ...], k: int, i: int) -> None:
        # Possible victims with priority < levels[k] (all of them when k == len(levels)).
        ranked = self.ranked[i]
        bound = self.levels[k] if k < len(self.levels) else math.inf
        start = bisect_right(ranked.neg_priority, -bound)
        last, row = ranked.cum[len(ranked)], ranked.cum[start]
        for d in range(self.width):
            columns[d][i] = last[d] - row[d]


def screen_table(state: ClusterState, *, include_opted_out: bool) -> ScreenTable:
    """The state's table for one opt-out variant, built on first use."""
    key = f"table:{include_opted_out}"
    table = state.memo.get(key)
    if table is None:
        table = state.memo[key] = ScreenTable(state, include_opted_out)
    return table


def carry_tables(old: ClusterState, new: ClusterState, touched: set[str]) -> None:
    """Give `new` (the state after a decision on `touched` nodes) patched copies of the
    tables `old` has built, instead of rebuilding them on the next decision."""
    for key, table in list(old.memo.items()):
        if key.startswith("table:"):
            new.memo[key] = table.patched(new, touched)
