"""Where the gang reprieve first fails, found by counting instead of walking every unit.

With one member shape, "the gang is placeable" means "the nodes can host `k` members in
total". Walking the reprieve order, a node's free space only shrinks, so each node can host
j members up to some point of the order and not after: its threshold t_j, found by bisecting
the node's rank-ordered prefix sums. The gang stays placeable while at least k thresholds
lie ahead, so the first unit that cannot come back is the k-th largest threshold, taken from
a heap. Every unit before it comes back; only nodes still able to host a member there can
matter afterwards, so the rest of the reprieve walks just their units.

The reprieve order puts "special" units first (PDB-violating ones; in soft opt-out mode,
opted-out ones before those), by segment then rank, then all other takable units by rank.
Positions encode that as segment * stride + rank; a "pinned" unit (the gang's own group)
never leaves its node.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from priogate.preemption.packing import MemberClass
from priogate.preemption.space import FreeSpace
from priogate.preemption.units import NodeUnits, Unit, UnitIndex

NORMAL = 3  # the segment of units that are not special
PINNED = -1


@dataclass(frozen=True)
class Order:
    r0: int  # rank of the first unit below the gang's priority
    stride: int
    pinned: int | None  # the rank of the gang's own placed members, if any
    opted: frozenset[int]  # ranks of units with an opted-out pod (soft mode), from r0 on
    violating: Callable[[int], bool]  # does the unit at this rank exceed a PDB allowance
    # rank -> segment, filled on first use: a decision only asks about the units of a few nodes
    _segments: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    def segment(self, rank: int) -> int:
        segment = self._segments.get(rank)
        if segment is None:
            if rank == self.pinned:
                segment = PINNED
            else:
                opted, violating = rank in self.opted, rank >= self.r0 and self.violating(rank)
                segment = 2 * (not opted) + (not violating) if opted or violating else NORMAL
            self._segments[rank] = segment
        return segment

    def position(self, rank: int) -> int:
        return self.segment(rank) * self.stride + rank


@dataclass(frozen=True)
class Start:
    cursor: float  # position of the first unit that cannot come back; inf: none
    free: dict[str, list[int]]  # the nodes that can still matter, at the cursor
    units: list[Unit]  # the units still to try, in reprieve order


class _Layout:
    """One node's unit entries. Special and pinned units form blocks of entries that the
    "normal" sums leave out; special ones also go back by position, before all normal ones.

    Thresholds are found by walking back from the least important entry, removing normal
    entries until the node holds the demand, then special ones; demands only grow (one
    more member each time), so each walk resumes where the previous one stopped."""

    def __init__(
        self,
        rows: NodeUnits | None,
        order: Order,
        dims: Sequence[int],
        base: Sequence[int],
    ):
        self.order = order
        self.ranks = rows.ranks if rows else ()
        self.cum = rows.cum if rows else ((0,) * (max(dims) + 1),)
        self.dims, self.base = dims, base
        self.start = bisect_left(self.ranks, order.r0)
        self.blocks: list[tuple[int, int]] = []  # entry ranges of special and pinned units, in order
        self.special_entries: set[int] = set()
        self.specials: list[tuple[int, list[int]]] = []  # (position, summed request), by position
        segment = order.segment
        special_ranks = sorted({r for r in self.ranks[self.start :] if segment(r) != NORMAL})
        for rank in special_ranks:
            first, last = bisect_left(self.ranks, rank), bisect_right(self.ranks, rank)
            self.blocks.append((first, last))
            self.special_entries.update(range(first, last))
            if segment(rank) != PINNED:
                lo, hi = self.cum[first], self.cum[last]
                self.specials.append((order.position(rank), [hi[d] - lo[d] for d in dims]))
        self.specials.sort()
        # The walk: normal entries at index >= at are removed, and specials from `spec` on.
        self.at = len(self.ranks)
        self.spec = len(self.specials)
        self.free = list(base)

    def normal_cum(self, i: int) -> list[int]:
        """Summed requests of the non-special entries before index i."""
        cum, dims = self.cum, self.dims
        row = cum[i]
        total = [row[d] for d in dims]
        for first, last in self.blocks:
            if first >= i:
                break
            lo, hi = cum[first], cum[min(last, i)]
            for k, d in enumerate(dims):
                total[k] -= hi[d] - lo[d]
        return total

    def free_at(self, cursor: float) -> list[int]:
        """Free space when every unit at or after `cursor` in the reprieve order is removed."""
        order = self.order
        if cursor >= NORMAL * order.stride:
            rank = cursor - NORMAL * order.stride
            i = len(self.ranks) if math.isinf(rank) else bisect_left(self.ranks, max(rank, order.r0))
        else:
            i = self.start
        top, kept = self.normal_cum(len(self.ranks)), self.normal_cum(i)
        free = [b + t - c for b, t, c in zip(self.base, top, kept, strict=True)]
        for position, vec in self.specials:
            if position >= cursor:
                for k, amount in enumerate(vec):
                    free[k] += amount
        return free

    def threshold(self, demand: Sequence[int]) -> float:
        """The last position up to which the node still holds `demand` (-inf: never)."""
        free, dims, cum = self.free, self.dims, self.cum
        if self.at == len(self.ranks) and _holds(free, demand):
            return math.inf
        while not _holds(free, demand) and self.at > self.start:
            self.at -= 1
            if self.at in self.special_entries:
                continue
            lo, hi = cum[self.at], cum[self.at + 1]
            for k, d in enumerate(dims):
                free[k] += hi[d] - lo[d]
        if _holds(free, demand) and self.spec == len(self.specials):
            return NORMAL * self.order.stride + self.ranks[self.at]
        # Every normal entry is out and the node still falls short: specials decide.
        while not _holds(free, demand) and self.spec > 0:
            self.spec -= 1
            for k, amount in enumerate(self.specials[self.spec][1]):
                free[k] += amount
        if _holds(free, demand):
            return self.specials[self.spec][0]
        return -math.inf


def _holds(free: Sequence[int], demand: Sequence[int]) -> bool:
    return all(f >= x for f, x in zip(free, demand, strict=True))


def _suffix_bound(
    rows: NodeUnits, order: Order, dims: Sequence[int], base: Sequence[int], demand: Sequence[int]
) -> float:
    """An upper bound of a node's first threshold: the position of the least important
    entry `at` such that removing entries[at:] holds `demand`, by bisecting each dimension's
    prefix sums (-inf: not even removing every entry from r0 on does). The exact walk removes
    special and pinned entries later or never, so it holds no earlier than this."""
    cum, last = rows.cum, rows.cum[-1]
    at = len(rows.ranks)
    for k, d in enumerate(dims):
        # the largest i with cum[i][d] <= last[d] + base - demand: entries[i:] free enough
        at = min(at, bisect_right(cum, last[d] + base[k] - demand[k], key=itemgetter(d)) - 1)
    if at < bisect_left(rows.ranks, order.r0):
        return -math.inf
    return NORMAL * order.stride + rows.ranks[at]


def _coarse(
    index: UnitIndex, r0: int, nodes: Collection[str], hosting: Collection[str]
) -> Iterator[tuple[int, str]]:
    """(rank of the least important entry, node) of the nodes with a takable unit that a
    member may use and cannot use as they are, descending."""
    for last, node in reversed(index.by_last):
        if last < r0:
            return
        if node in nodes and node not in hosting:
            yield last, node


def critical_start(
    index: UnitIndex,
    order: Order,
    member: MemberClass,
    dims: Sequence[int],
    base: FreeSpace,
) -> Start | None:
    """The reprieve state at its first failure (cursor inf: everything comes back), or None
    when the members cannot be placed even with every takable unit removed.

    Nodes enter a max-heap with an upper bound of their first threshold and are only laid
    out when that bound reaches the top, so nodes that cannot be among the last k to hold a
    member are never walked. The bound is tightened in two steps: first the position of the
    node's least important entry (read off the unit index's `by_last`, so nodes join the
    heap only as their turn comes), then, when that reaches the top, the position found by
    bisecting the node's prefix sums as if no unit were special (see _suffix_bound)."""
    vec = member.vector
    normal = NORMAL * order.stride
    per_node = index.per_node
    # Nodes that hold a member with nothing removed, then the others, one at a time, by
    # their least important entry (the coarse bound), most important first.
    hosting = {n for n in base.candidates(vec) if n in member.nodes and _holds(base[n], vec)}
    heap: list[tuple[float, int, str, int]] = [(-math.inf, 1, n, 0) for n in hosting]
    coarse = _coarse(index, order.r0, member.nodes, hosting)
    following = next(coarse, None)
    if following is not None:
        heap.append((-(normal + following[0]), 2, following[1], 0))
    heapq.heapify(heap)
    layouts: dict[str, _Layout] = {}
    first: dict[str, float] = {}
    taken, cursor = 0, None
    while heap:
        negative, kind, node, count = heapq.heappop(heap)
        if cursor is not None and -negative < cursor:
            break
        if kind == 2:  # replace the coarse bound by the suffix bound, if the node can help at all
            following = next(coarse, None)
            if following is not None:
                heapq.heappush(heap, (-(normal + following[0]), 2, following[1], 0))
            bound = _suffix_bound(per_node[node], order, dims, base[node], vec)
            if bound > -math.inf:
                heapq.heappush(heap, (-bound, 1, node, 0))
            continue
        if kind == 1:  # lay the node out and replace its bound by its exact first threshold
            layout = _Layout(per_node.get(node), order, dims, base[node])
            layouts[node] = layout
            first[node] = layout.threshold(vec)
            if first[node] > -math.inf and cursor is None:
                heapq.heappush(heap, (-first[node], 0, node, 1))
            continue
        if cursor is not None:
            continue
        taken += 1
        if taken == len(member.members):
            cursor = -negative  # then lay out nodes whose bound ties it, then stop
            continue
        nxt = layouts[node].threshold([(count + 1) * a for a in vec])
        if nxt > -math.inf:
            heapq.heappush(heap, (-nxt, 0, node, count + 1))
    if cursor is None:
        return None
    alive = sorted(n for n, t in first.items() if t >= cursor)
    if math.isinf(cursor):
        return Start(cursor, {n: list(base[n]) for n in alive}, [])
    free = {n: layouts[n].free_at(cursor) for n in alive}
    ranks: set[int] = set()
    for n in alive:
        layout = layouts[n]
        ranks.update(layout.ranks[layout.start :])
    positions = sorted(
        p for p in (order.position(r) for r in ranks if order.segment(r) != PINNED) if p >= cursor
    )
    return Start(cursor, free, [index.unit_at[p % order.stride] for p in positions])
