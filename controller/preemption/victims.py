"""Victim selection on one node: kube-scheduler's SelectVictimsOnNode, on integer vectors.

Remove every lower-priority possible victim; if the preemptor then fits, put victims back one
at a time, most important first (PDB-violating ones before the others), keeping each one
whose return still leaves room. What could not be put back is the victim set.

Work happens only in the dimensions the preemptor asks for, as "slack": free space minus the
preemptor's request, which must stay >= 0 everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.preemption.fit import Need
from controller.preemption.snapshot import PDBInfo, PodInfo
from controller.preemption.state import Ranked

PRIORITY_SHIFT = 2**31  # kube-scheduler shifts priorities so negative ones never help a sum
NO_VICTIM_PRIORITY = -(2**31) - 1  # below any int32 priority: no victim beats any victim


@dataclass(frozen=True, slots=True)
class NodeVictims:
    node: str
    victims: tuple[PodInfo, ...]  # most important first
    pdb_violations: int
    opted_out: int  # victims that asked not to be preempted (soft mode only)

    @property
    def key(self) -> tuple:
        """kube-scheduler's node order, lexicographic, smaller is better: fewest PDB
        violations, lowest highest-victim priority, smallest sum of (shifted) priorities,
        fewest victims, latest start among the top-priority victims; then the node name.
        Soft opt-out mode puts "fewest opted-out victims" in front."""
        victims = self.victims
        if not victims:
            return (self.opted_out, self.pdb_violations, NO_VICTIM_PRIORITY, 0, 0, float("-inf"), self.node)
        top = victims[0].priority
        earliest = min(p.start_time for p in victims if p.priority == top)
        return (
            self.opted_out,
            self.pdb_violations,
            top,
            sum(p.priority for p in victims) + PRIORITY_SHIFT * len(victims),
            len(victims),
            -earliest,
            self.node,
        )


CRITERIA = (
    "fewest opted-out victims",
    "fewest PDB violations",
    "lowest highest-victim priority",
    "smallest sum of victim priorities",
    "fewest victims",
    "latest start of the highest-priority victims",
    "node name",
)


def violating_positions(
    ranked: Ranked, start: int, pdbs: Sequence[PDBInfo], pdb_matches: Mapping[str, tuple[int, ...]]
) -> set[int]:
    """Positions in `ranked[start:]` whose eviction would exceed a PDB's allowance, walking
    in importance order with each PDB's status.disruptionsAllowed (filterPodsWithPDBViolation)."""
    allowed: dict[int, int] = {}
    violating: set[int] = set()
    for position in range(start, len(ranked)):
        matched = pdb_matches.get(ranked.pods[position].key)
        if not matched:
            continue
        for index in matched:
            left = allowed.get(index, pdbs[index].disruptions_allowed) - 1
            allowed[index] = left
            if left < 0:
                violating.add(position)
    return violating


def first_victim(ranked: Ranked, start: int, need: Need, slack: Sequence[int]) -> int:
    """The largest j such that keeping ranked[start:j] (removing the rest) still fits.

    ranked[j] is then the most important pod that must go, and j == len(ranked) means
    nothing has to. Bisect over the prefix sums: keeping more never makes room."""
    cum = ranked.cum
    last = cum[len(ranked)]
    limits = [(d, slack[k] + last[d]) for k, (d, _) in enumerate(need)]
    lo, hi = start, len(ranked)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        row = cum[mid]
        if all(row[d] <= limit for d, limit in limits):
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
    violating: set[int],
    opted_out_first: bool,
) -> NodeVictims:
    """The reprieve loop over ranked[start:], which must fit once all of it is removed.

    `slack[k]` is the free space in need[k]'s dimension minus the preemptor's request with
    nothing removed. Soft opt-out mode reprieves opted-out pods before everything else."""
    count = len(ranked)
    if not violating and not (opted_out_first and any(p.opted_out for p in ranked.pods[start:])):
        return _select_in_importance_order(node, ranked, start, need, slack)
    cum = ranked.cum
    room = [slack[k] + cum[count][d] - cum[start][d] for k, (d, _) in enumerate(need)]

    def reprieve_rank(position: int) -> tuple[bool, bool, int]:
        pod = ranked.pods[position]
        return (not (opted_out_first and pod.opted_out), position not in violating, position)

    victims: list[int] = []
    for position in sorted(range(start, count), key=reprieve_rank):
        vec = ranked.vectors[position]
        if all(vec[d] <= room[k] for k, (d, _) in enumerate(need)):
            for k, (d, _) in enumerate(need):
                room[k] -= vec[d]
        else:
            victims.append(position)
    victims.sort()  # back to importance order
    chosen = tuple(ranked.pods[p] for p in victims)
    return NodeVictims(
        node,
        chosen,
        pdb_violations=sum(1 for p in victims if p in violating),
        opted_out=sum(1 for p in chosen if p.opted_out) if opted_out_first else 0,
    )


def _select_in_importance_order(
    node: str, ranked: Ranked, start: int, need: Need, slack: Sequence[int]
) -> NodeVictims:
    # Everything before the first victim is reprieved without a check (the prefix fits).
    j = first_victim(ranked, start, need, slack)
    count = len(ranked)
    if j == count:
        return NodeVictims(node, (), 0, 0)
    cum = ranked.cum
    room = [slack[k] + cum[count][d] - cum[j][d] for k, (d, _) in enumerate(need)]
    victims = [ranked.pods[j]]
    for position in range(j + 1, count):
        vec = ranked.vectors[position]
        if all(vec[d] <= room[k] for k, (d, _) in enumerate(need)):
            for k, (d, _) in enumerate(need):
                room[k] -= vec[d]
        else:
            victims.append(ranked.pods[position])
    return NodeVictims(node, tuple(victims), 0, 0)
