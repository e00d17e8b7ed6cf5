"""Free space per node as a gang's members see it, worked out per node on demand.

A gang decision reads the free space of every node only to learn that, in a full cluster,
almost none can host a member as things are. The nodes that might are found column by
column on the screening table (C-level passes over arrays, see table); only those, and the
nodes the decision then walks, get their free space computed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import ge

from priogate.preemption.nodes import nominated_load
from priogate.preemption.state import ClusterState
from priogate.preemption.table import screen_table


class FreeSpace(Mapping[str, tuple[int, ...]]):
    """Node -> free space in the gang's dimensions `dims`: allocatable minus requests, minus
    what pods nominated there with priority >= `priority` hold (the gang's own excepted),
    plus, with `leaving`, what lower-priority terminating pods free anyway."""

    def __init__(
        self,
        state: ClusterState,
        dims: Sequence[int],
        priority: int,
        own: Collection[str],
        nodes: Sequence[str],
        node_set: frozenset[str],
        *,
        leaving: bool,
    ) -> None:
        """`nodes` the nodes in order, `node_set` the same as a set (shared: large sets a
        decision makes cost every garbage collection pass while they live)."""
        self.state, self.dims, self.priority, self.own = state, tuple(dims), priority, own
        self.nodes, self.node_set = nodes, node_set
        self.leaving = leaving
        self.table = table = screen_table(state, include_opted_out=False)  # the same in both
        self.columns = [table.free[d] for d in self.dims]
        self.pairs = tuple((d, 0) for d in self.dims)
        self.cache: dict[str, tuple[int, ...]] = {}

    def __getitem__(self, node: str) -> tuple[int, ...]:
        free = self.cache.get(node)
        if free is not None:
            return free
        if node not in self.node_set:
            raise KeyError(node)
        table, dims, state = self.table, self.dims, self.state
        i = table.index[node]
        free = tuple([column[i] for column in self.columns])
        if node in state.nominated:
            held = nominated_load(state, node, self.priority, self.own, self.pairs)
            free = tuple(f - h for f, h in zip(free, held, strict=True))
        if self.leaving and i in table.leaving_set:
            terminating = table.nodes[i].terminating
            last, row = terminating.cum[len(terminating)], terminating.cum[terminating.below(self.priority)]
            free = tuple(f + last[d] - row[d] for f, d in zip(free, dims, strict=True))
        self.cache[node] = free
        return free

    def __contains__(self, node: object) -> bool:
        return node in self.node_set

    def __iter__(self) -> Iterator[str]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def candidates(self, vector: Sequence[int]) -> list[str]:
        """The nodes, in order, whose space may hold `vector` in every dimension it asks
        for: a superset (nominated pods only take space away; terminating ones, which may
        add some, keep their node in)."""
        table = self.table
        count = len(table.names)
        found: set[int] | None = None
        for d, amount in zip(self.dims, vector, strict=True):
            if amount > 0:
                fits = set(compress(range(count), map(ge, table.free[d], repeat(amount, count))))
                found = fits if found is None else found & fits
        if found is None:
            found = set(range(count))
        if self.leaving:
            found |= table.leaving_set
        names, node_set = table.names, self.node_set
        return [names[i] for i in sorted(found) if names[i] in node_set]
