"""Gang preemption: place a PodGroup's needed members all at once, on any nodes.

kube-scheduler cannot do this (victims come from one node). The algorithm is its reprieve
loop lifted to the whole cluster, as KEP-5710 does for workloads: remove every lower-priority
victim unit (single pods, whole PodGroups), check that all needed members can be placed,
then put units back most important first (PDB-violating ones first), keeping each whose
return leaves the gang placeable. A group that cannot come back whole may still come back
with only its surplus taken (it keeps minMember placed); otherwise it goes whole. Nothing is
decided unless every needed member is placed.

The result takes the lowest possible highest-victim priority (the first unit that cannot
come back bounds every alternative) and is 1-minimal: returning any one victim unit makes
the gang unplaceable. Feasibility is exact (see packing), so both properties hold exactly.

Speed: with one member shape, no PDB-violating unit and strict opt-out, the first unit that
cannot come back is found by counting, per node, up to which rank it can still host j
members (a bisect over rank-ordered prefix sums), and only the few nodes still able to host
a member there are walked. Otherwise every unit is walked, with a placement kept as witness
so that most returns are checked on their own node only.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controller.preemption.fit import need_of, static_failure, static_signature
from controller.preemption.nodes import nominated_load
from controller.preemption.outcome import Outcome, fits, unresolved, with_note
from controller.preemption.packing import MemberClass, Packer
from controller.preemption.single import NOT_ELIGIBLE_NEVER, NOT_ELIGIBLE_TERMINATING, waiting_for_victims
from controller.preemption.snapshot import PodGroupInfo, PodInfo
from controller.preemption.state import ClusterState, importance_key
from controller.preemption.units import GROUP_PREFIX, Unit, UnitIndex, unit_index


@dataclass(frozen=True)
class GangRequest:
    group: PodGroupInfo
    pending: tuple[PodInfo, ...]  # pending members, oldest first
    needed: int  # members still to place to reach minMember
    priority: int
    never: bool  # preemptionPolicy Never on the group's class or a needed member


@dataclass(frozen=True)
class Problem:
    key: str
    priority: int
    own_unit: str
    dims: tuple[int, ...]  # full-vector dimensions the members ask for
    classes: tuple[MemberClass, ...]
    nodes: tuple[str, ...]  # sorted nodes some member may use (static filters)
    now: Mapping[str, tuple[int, ...]]  # free space with nothing removed
    base: Mapping[str, tuple[int, ...]]  # ... plus lower-priority terminating pods gone
    failures: Mapping[str, str]


@dataclass(frozen=True)
class Taken:
    unit: Unit
    pods: tuple[PodInfo, ...]
    whole: bool


@dataclass(frozen=True)
class Solution:
    placement: Mapping[str, str]
    taken: tuple[Taken, ...]
    violating: frozenset[str]
    exhausted: bool


def _problem(state: ClusterState, request: GangRequest, members: Sequence[PodInfo]) -> Problem:
    priority = request.priority
    dims = tuple(sorted({d for m in members for d, _ in need_of(state.vectors[m.key])}))
    shapes: dict[tuple, list[PodInfo]] = {}
    for member in members:
        vector = tuple(state.vectors[member.key][d] for d in dims)
        shapes.setdefault((vector, static_signature(member)), []).append(member)
    classes, usable, failures = [], set(), {}
    for (vector, _), pods in shapes.items():
        allowed = frozenset(n for n in state.node_names if not static_failure(pods[0], state.nodes[n].info))
        classes.append(MemberClass(vector, tuple(p.key for p in pods), allowed))
        usable |= allowed
    for name in state.node_names:
        if name not in usable:
            failures[name] = static_failure(members[0], state.nodes[name].info)
    own = {p.key for p in state.pods.values() if p.group == request.group.key}
    pairs = tuple((d, 0) for d in dims)
    now, base = {}, {}
    for name in sorted(usable):
        node = state.nodes[name]
        held = (
            nominated_load(state, name, priority, own, pairs) if name in state.nominated else [0] * len(dims)
        )
        free = [node.alloc[d] - node.requested[d] - held[k] for k, d in enumerate(dims)]
        now[name] = tuple(free)
        leaving = node.terminating
        last, row = leaving.cum[len(leaving)], leaving.cum[leaving.below(priority)]
        base[name] = tuple(f + last[d] - row[d] for f, d in zip(free, dims, strict=True))
    return Problem(
        GROUP_PREFIX + request.group.key,
        priority,
        GROUP_PREFIX + request.group.key,
        dims,
        tuple(classes),
        tuple(sorted(usable)),
        now,
        base,
        failures,
    )


class Reprieve:
    """Free space per node while units go back, with a member placement as witness."""

    def __init__(
        self, problem: Problem, packer: Packer, free: dict[str, list[int]], placement: Mapping[str, str]
    ):
        self.dims = problem.dims
        self.packer = packer
        self.free = free
        self.active = sorted(free)
        self.active_set = set(self.active)
        self.member_vectors = {key: cls.vector for cls in packer.classes for key in cls.members}
        self._witness(placement)

    def _witness(self, placement: Mapping[str, str]) -> None:
        self.placement = dict(placement)
        self.used: dict[str, list[int]] = {}
        for member, node in placement.items():
            row = self.used.setdefault(node, [0] * len(self.dims))
            for k, amount in enumerate(self.member_vectors[member]):
                row[k] += amount

    def _shift(self, pods: Iterable[PodInfo], vectors: Mapping[str, tuple[int, ...]], sign: int) -> list[str]:
        touched = []
        for pod in pods:
            room = self.free.get(pod.node_name)
            if room is None or pod.node_name not in self.active_set:
                continue
            vec = vectors[pod.key]
            for k, d in enumerate(self.dims):
                room[k] += sign * vec[d]
            touched.append(pod.node_name)
        return touched

    def put_back(self, pods: Sequence[PodInfo], vectors: Mapping[str, tuple[int, ...]]) -> bool:
        touched = self._shift(pods, vectors, -1)
        if not touched:
            return True  # only nodes that can no longer host a member: cannot matter
        if all(self._holds(n) for n in touched):
            return True
        placement = self.packer.place(self.active, self.free)
        if placement is not None:
            self._witness(placement)
            return True
        self._shift(pods, vectors, +1)
        return False

    def remove(self, pods: Sequence[PodInfo], vectors: Mapping[str, tuple[int, ...]]) -> None:
        self._shift(pods, vectors, +1)  # more room: the witness still holds

    def _holds(self, node: str) -> bool:
        used = self.used.get(node)
        return used is None or all(u <= f for u, f in zip(used, self.free[node], strict=True))

    def prune(self) -> None:
        """Forget nodes that cannot host any member: from here on their space only shrinks."""
        keep = [n for n in self.active if n in self.used or self.packer.can_host_any(n, self.free[n])]
        if len(keep) != len(self.active):
            self.active, self.active_set = keep, set(keep)


def _reprieve(
    reprieve: Reprieve, order: Iterable[Unit], vectors: Mapping[str, tuple[int, ...]]
) -> list[Taken]:
    taken: list[Taken] = []
    for unit in order:
        if reprieve.put_back(unit.pods, vectors):
            continue
        if unit.surplus > 0:
            back, lost = [], []
            for pod in unit.pods:
                (back if reprieve.put_back((pod,), vectors) else lost).append(pod)
            if len(lost) <= unit.surplus:
                taken.append(Taken(unit, tuple(lost), whole=False))
                reprieve.prune()
                continue
            reprieve.remove(back, vectors)
        taken.append(Taken(unit, unit.pods, whole=True))
        reprieve.prune()
    return taken


def _removable(index: UnitIndex, node: str, r0: int, dims: Sequence[int], cursor: int) -> list[int]:
    """Summed requests on `node` of units ranked at or after max(r0, cursor)."""
    rows = index.per_node.get(node)
    if rows is None:
        return [0] * len(dims)
    start = bisect_left(rows.ranks, max(r0, cursor))
    last, row = rows.cum[len(rows.ranks)], rows.cum[start]
    return [last[d] - row[d] for d in dims]


def _violating(
    state: ClusterState, index: UnitIndex, r0: int, own_unit: str, domain: set[str]
) -> frozenset[str]:
    """Victim pods whose eviction exceeds a PDB allowance, walking the takable units that
    touch the domain in rank order (filterPodsWithPDBViolation over the whole gang domain)."""
    allowed: dict[int, int] = {}
    violating = set()
    for rank in index.pdb_ranks[bisect_left(index.pdb_ranks, r0) :]:
        unit = index.units[rank]
        if unit.key == own_unit or not any(p.node_name in domain for p in unit.pods):
            continue
        for pod in unit.pods:
            for i in state.pdb_matches.get(pod.key, ()):
                allowed[i] = allowed.get(i, state.pdbs[i].disruptions_allowed) - 1
                if allowed[i] < 0:
                    violating.add(pod.key)
    return frozenset(violating)


def _critical_rank(
    problem: Problem, index: UnitIndex, r0: int, domain: Sequence[str]
) -> tuple[float, dict[str, float]]:
    """One member shape: the rank of the first unit that cannot come back (inf: none), and
    per node the last rank up to which it can still host one member."""
    cls = problem.classes[0]
    dims = problem.dims

    def threshold(node: str, count: int) -> float:
        demand = [count * a for a in cls.vector]
        base = problem.base[node]
        rows = index.per_node.get(node)
        if rows is None:
            return math.inf if all(b >= x for b, x in zip(base, demand, strict=True)) else -math.inf
        ranks, cum = rows.ranks, rows.cum
        last = cum[len(ranks)]
        limits = [(d, b + last[d] - x) for d, b, x in zip(dims, base, demand, strict=True)]
        lo = bisect_left(ranks, r0)
        if not all(cum[lo][d] <= limit for d, limit in limits):
            return -math.inf
        hi = len(ranks)
        while lo < hi:  # largest i where keeping entries[:i] back still hosts `count`
            mid = (lo + hi + 1) // 2
            if all(cum[mid][d] <= limit for d, limit in limits):
                lo = mid
            else:
                hi = mid - 1
        return math.inf if lo == len(ranks) else ranks[lo]

    first = {node: threshold(node, 1) for node in domain}
    heap = [(-t, node, 1) for node, t in first.items() if t > -math.inf]
    heapq.heapify(heap)
    for _ in range(len(cls.members) - 1):
        _, node, count = heapq.heappop(heap)
        nxt = threshold(node, count + 1)
        if nxt > -math.inf:
            heapq.heappush(heap, (-nxt, node, count + 1))
    return -heap[0][0], first


def _solve(
    state: ClusterState, problem: Problem, *, include_opted_out: bool, general: bool = False
) -> Solution | str:
    """The victims and placement for one opt-out variant, or why there is none."""
    index = unit_index(state, include_opted_out=include_opted_out)
    r0 = bisect_right(index.neg_priority, -problem.priority)  # first unit below the gang's priority
    own_rank = next((u.rank for u in index.units[r0:] if u.key == problem.own_unit), None)
    packer = Packer(problem.classes)
    vectors = state.vectors
    free_all: dict[str, list[int]] = {}
    for node in problem.nodes:
        extra = _removable(index, node, r0, problem.dims, r0)
        if own_rank is not None:
            own = index.units[own_rank]
            for pod in own.pods:
                if pod.node_name == node:
                    extra = [e - vectors[pod.key][d] for e, d in zip(extra, problem.dims, strict=True)]
        free_all[node] = [b + e for b, e in zip(problem.base[node], extra, strict=True)]
    domain = [n for n in problem.nodes if packer.can_host_any(n, free_all[n])]
    placement = packer.place(domain, free_all)
    if placement is None:
        return "exhausted" if packer.exhausted else "infeasible"
    domain_set = set(domain)
    violating = _violating(state, index, r0, problem.own_unit, domain_set)
    simple = len(problem.classes) == 1 and not include_opted_out and not violating and own_rank is None
    if simple and not general:
        cursor, first = _critical_rank(problem, index, r0, domain)
        if cursor == math.inf:
            free = {n: list(problem.base[n]) for n in domain}
            return Solution(packer.place(domain, free) or {}, (), violating, packer.exhausted)
        domain = [n for n in domain if first[n] >= cursor]
        free = {}
        for node in domain:
            extra = _removable(index, node, r0, problem.dims, int(cursor))
            free[node] = [b + e for b, e in zip(problem.base[node], extra, strict=True)]
        ranks = sorted({r for n in domain for r in _ranks_from(index, n, int(cursor))})
        order: list[Unit] = [index.units[r] for r in ranks]
        placement = packer.place(domain, free)
        assert placement is not None, "the critical rank is placeable by construction"
    else:
        free = {n: list(free_all[n]) for n in domain}
        touching = [
            u
            for u in index.units[r0:]
            if u.key != problem.own_unit and any(p.node_name in domain_set for p in u.pods)
        ]

        def reprieve_rank(unit: Unit) -> tuple[bool, bool, int]:
            opted = include_opted_out and any(p.opted_out for p in unit.pods)
            return (not opted, not any(p.key in violating for p in unit.pods), unit.rank)

        order = sorted(touching, key=reprieve_rank)
    reprieve = Reprieve(problem, packer, free, placement)
    taken = _reprieve(reprieve, order, vectors)
    return Solution(reprieve.placement, tuple(taken), violating, packer.exhausted)


def _ranks_from(index: UnitIndex, node: str, cursor: int) -> Sequence[int]:
    rows = index.per_node.get(node)
    if rows is None:
        return ()
    return rows.ranks[bisect_left(rows.ranks, cursor) :]


def preempt_group(state: ClusterState, request: GangRequest, *, opt_out_mode: str, explain: bool) -> Outcome:
    key = GROUP_PREFIX + request.group.key
    note = request.group.priority_note
    if len(request.pending) < request.needed:
        reason = (
            f"needs {request.needed} more member(s) to reach minMember {request.group.min_member}, "
            f"but only {len(request.pending)} are pending"
        )
        return unresolved(key, with_note(reason, note))
    if request.never:
        return unresolved(key, with_note(NOT_ELIGIBLE_NEVER, note))
    members = request.pending[: request.needed]
    if any(m.nominated_node and waiting_for_victims(state, m, request.priority) for m in members):
        return unresolved(key, with_note(NOT_ELIGIBLE_TERMINATING, note))
    problem = _problem(state, request, members)
    if Packer(problem.classes).place(problem.nodes, problem.now) is not None:
        return fits(key)
    variants = [False]
    if opt_out_mode == "soft" and any(node.has_opted_out for node in state.nodes.values()):
        variants.append(True)
    for include_opted_out in variants:
        solution = _solve(state, problem, include_opted_out=include_opted_out)
        if isinstance(solution, Solution):
            return _decision(problem, request, solution, opted_out=include_opted_out, explain=explain)
    why = "the search budget ran out" if solution == "exhausted" else "not enough room"
    reason = (
        f"cannot place all {request.needed} needed member(s) even after preempting every "
        f"lower-priority pod ({why}; {len(problem.nodes)} node(s) pass the members' node filters)"
    )
    nodes = dict(problem.failures) if explain else None
    return unresolved(key, with_note(reason, note), nodes)


def _decision(
    problem: Problem, request: GangRequest, solution: Solution, *, opted_out: bool, explain: bool
) -> Outcome:
    victims = tuple(sorted((p for t in solution.taken for p in t.pods), key=importance_key))
    wholes = sum(1 for t in solution.taken if t.whole and t.unit.group is not None)
    surplus = sum(len(t.pods) for t in solution.taken if not t.whole)
    used_nodes = sorted(set(solution.placement.values()))
    if victims:
        summary = f"preempting {len(victims)} pod(s), highest victim priority {victims[0].priority}"
        if wholes or surplus:
            summary += (
                f" ({wholes} whole PodGroup(s), {surplus} surplus member(s) of PodGroups kept at minMember)"
            )
        violations = sum(1 for v in victims if v.key in solution.violating)
        if violations:
            summary += f", {violations} PDB violation(s)"
        if opted_out:
            summary += ", opted-out pods included (soft mode: nothing else works)"
    else:
        summary = "no new victims: lower-priority pods already terminating make room"
    reason = f"place {request.needed} member(s) on {len(used_nodes)} node(s): {summary}"
    if solution.exhausted:
        reason += "; the placement search hit its budget, so the victim set may not be minimal"
    nodes = None
    if explain:
        nodes = dict(problem.failures)
        hosting = {n: sum(1 for v in solution.placement.values() if v == n) for n in used_nodes}
        for name in problem.nodes:
            if name in hosting:
                here = sum(1 for v in victims if v.node_name == name)
                nodes[name] = f"chosen: hosts {hosting[name]} member(s), {here} victim(s) here"
            else:
                nodes[name] = "not needed: the members fit elsewhere with lower-priority or fewer victims"
    return Outcome(
        preemptor=problem.key,
        status="preempt",
        reason=with_note(reason, request.group.priority_note),
        node=None,
        placements=dict(sorted(solution.placement.items())),
        victims=victims,
        nodes=nodes,
        clear_below=None,
    )
