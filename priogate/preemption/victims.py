"""Victim selection on one node: kube-scheduler's SelectVictimsOnNode, on integer vectors.

Remove every lower-priority possible victim; if the preemptor then fits, put victims back one
at a time, most important first (PDB-violating ones before the others), keeping each one
whose return still leaves room. What could not be put back is the victim set.

Work happens only in the dimensions the preemptor asks for, as "room": free space minus the
preemptor's request, which must stay >= 0 everywhere. Non-violating pods are reprieved in
importance order, so their first victim is found by bisecting the node's prefix sums: every
pod before it comes back without a check.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from priogate.preemption.fit import Need
from priogate.preemption.records import PDBInfo, PodInfo
from priogate.preemption.state import Ranked

PRIORITY_SHIFT = 2**31  # kube-scheduler shifts priorities so negative ones never help a sum
NO_VICTIM_PRIORITY = -(2**31) - 1  # below any int32 priority: no victim beats any victim

CRITERIA = (
    "fewest opted-out victims",
    "fewest owner/driver victims",
    "fewest PDB violations",
    "lowest highest-victim priority",
    "smallest sum of victim priorities",
    "fewest victims",
    "latest start of the highest-priority victims",
    "node name",
)


@dataclass(frozen=True, slots=True)
class NodeVictims:
    node: str
    victims: tuple[PodInfo, ...]  # most important first
    pdb_violations: int
    opted_out: int  # victims that asked not to be preempted (soft mode only)
    key: tuple  # see node_victims
    owners: int = 0  # owner/driver victims (victim classes policy only)


def node_victims(
    node: str, victims: tuple[PodInfo, ...], pdb_violations: int, opted_out: int, owners: int = 0
) -> NodeVictims:
    """kube-scheduler's node order as a key, lexicographic, smaller is better: fewest PDB
    violations, lowest highest-victim priority, smallest sum of (shifted) priorities, fewest
    victims, latest start among the top-priority victims; then the node name. Soft opt-out
    mode puts "fewest opted-out victims" in front, and the victim classes policy "fewest
    owner/driver victims" next (both always 0 otherwise)."""
    if not victims:
        key = (opted_out, owners, pdb_violations, NO_VICTIM_PRIORITY, 0, 0, float("-inf"), node)
        return NodeVictims(node, victims, pdb_violations, opted_out, key, owners)
    top = victims[0].priority
    total = 0
    earliest = float("inf")
    for pod in victims:
        total += pod.priority
        if pod.priority == top and pod.start_time < earliest:
            earliest = pod.start_time
    key = (
        opted_out,
        owners,
        pdb_violations,
        top,
        total + PRIORITY_SHIFT * len(victims),
        len(victims),
        -earliest,
        node,
    )
    return NodeVictims(node, victims, pdb_violations, opted_out, key, owners)


def violating_positions(ranked: Ranked, start: int, pdbs: Sequence[PDBInfo]) -> list[int]:
    """Positions in `ranked[start:]` whose eviction would exceed a PDB's allowance, walking
    in importance order from each PDB's status.disruptionsAllowed
    (filterPodsWithPDBViolation). Sorted."""
    positions = ranked.pdb_positions
    first = bisect_left(positions, start)
    if first == len(positions):
        return []
    allowed: dict[int, int] = {}
    violating = []
    for position, indices in zip(positions[first:], ranked.pdb_indices[first:], strict=True):
        hit = False
        for index in indices:
            left = allowed.get(index, pdbs[index].disruptions_allowed) - 1
            allowed[index] = left
            if left < 0:
                hit = True
        if hit:
            violating.append(position)
    return violating


def first_victim(
    ranked: Ranked, start: int, need: Need, room: Sequence[int], skip: Sequence[int] = ()
) -> int:
    """The largest j such that putting back ranked[start:j] (except the positions in the
    sorted `skip`) fits in `room`, the space with all of ranked[start:] removed. ranked[j]
    is then the first pod that cannot come back; j == len(ranked) means none."""
    cum = ranked.cum
    base = cum[start]
    dims = [d for d, _ in need]
    skipped = [[0] * len(dims)]
    for position in skip:
        vec = ranked.vectors[position]
        skipped.append([s + vec[d] for s, d in zip(skipped[-1], dims, strict=True)])
    lo, hi = start, len(ranked)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        row = cum[mid]
        minus = skipped[bisect_left(skip, mid)]
        k = 0
        for d in dims:
            if row[d] - base[d] - minus[k] > room[k]:
                break
            k += 1
        if k == len(dims):
            lo = mid
        else:
            hi = mid - 1
    return lo


def select_victims(
    node: str,
    ranked: Ranked,
    start: int,
    need: Need,
    slack: Sequence[int],
    violating: Sequence[int],
    opted_out_first: bool,
) -> NodeVictims:
    """The reprieve loop over ranked[start:], which must fit once all of it is removed.

    `slack[k]` is the free space in need[k]'s dimension minus the preemptor's request with
    nothing removed; `violating` the sorted PDB-violating positions. Soft opt-out mode
    reprieves opted-out pods before everything else."""
    count = len(ranked)
    if opted_out_first and any(p.opted_out for p in ranked.pods[start:]):
        return _select_opted_out_first(node, ranked, start, need, slack, violating)
    dims = [d for d, _ in need]
    cum, vectors = ranked.cum, ranked.vectors
    last, base = cum[count], cum[start]
    room = [s + last[d] - base[d] for s, d in zip(slack, dims, strict=True)]
    lost: list[int] = []
    for position in violating:  # PDB-violating pods get the first chance to stay
        vec = vectors[position]
        if _fits(vec, dims, room):
            _take(vec, dims, room)
        else:
            lost.append(position)
    pdb_violations = len(lost)
    j = first_victim(ranked, start, need, room, violating)
    if j < count:
        # Everything before j that is not violating came back: charge it to the room.
        skipped = set(violating)
        row = cum[j]
        for k, d in enumerate(dims):
            room[k] -= row[d] - base[d]
        for position in violating:
            if position < j:
                vec = vectors[position]
                for k, d in enumerate(dims):
                    room[k] += vec[d]
        lost.append(j)
        for position in range(j + 1, count):
            if position in skipped:
                continue
            vec = vectors[position]
            if _fits(vec, dims, room):
                _take(vec, dims, room)
            else:
                lost.append(position)
        lost.sort()
    return node_victims(node, tuple(ranked.pods[p] for p in lost), pdb_violations, 0)


def _fits(vec: Sequence[int], dims: Sequence[int], room: Sequence[int]) -> bool:
    return all(vec[d] <= r for d, r in zip(dims, room, strict=True))


def _take(vec: Sequence[int], dims: Sequence[int], room: list[int]) -> None:
    for k, d in enumerate(dims):
        room[k] -= vec[d]


def _select_opted_out_first(
    node: str, ranked: Ranked, start: int, need: Need, slack: Sequence[int], violating: Sequence[int]
) -> NodeVictims:
    # Soft mode's last resort: opted-out pods are reprieved before anything else.
    dims = [d for d, _ in need]
    count = len(ranked)
    last, base = ranked.cum[count], ranked.cum[start]
    room = [s + last[d] - base[d] for s, d in zip(slack, dims, strict=True)]
    bad = set(violating)
    order = sorted(range(start, count), key=lambda p: (not ranked.pods[p].opted_out, p not in bad, p))
    lost = []
    for position in order:
        vec = ranked.vectors[position]
        if _fits(vec, dims, room):
            _take(vec, dims, room)
        else:
            lost.append(position)
    lost.sort()
    chosen = tuple(ranked.pods[p] for p in lost)
    return node_victims(node, chosen, sum(1 for p in lost if p in bad), sum(1 for p in chosen if p.opted_out))
