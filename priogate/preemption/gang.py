"""Gang preemption: place a PodGroup's needed members all at once, on any nodes.

kube-scheduler cannot do this (victims come from one node). The algorithm is its reprieve
loop lifted to the whole cluster, as KEP-5710 does for workloads: remove every lower-priority
victim unit (single pods, whole PodGroups), check that all needed members can be placed,
then put units back most important first (PDB-violating ones first, and in soft opt-out
mode opted-out ones before those), keeping each whose return leaves the gang placeable. A
group that cannot come back whole may come back with only surplus members taken; otherwise
it goes whole. Nothing is decided unless every needed member is placed.

The result has the lowest possible highest-victim priority when no PDB reorders the
reprieve (the first unit that cannot come back bounds every alternative), and it is
1-minimal: returning any one victim unit makes the gang unplaceable. Feasibility is exact
(see packing), so both hold exactly. With one member shape the first failure is found by
counting (see critical); otherwise every takable unit is walked.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from priogate.preemption.critical import Order, critical_start
from priogate.preemption.fit import need_of, static_failure, static_signature
from priogate.preemption.gang_fit import gang_fit
from priogate.preemption.outcome import PDB_STRICT_REASON, Outcome, fits, unresolved, with_note
from priogate.preemption.packing import MemberClass, Packer
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.records import PodGroupInfo, PodInfo
from priogate.preemption.reprieve import Reprieve, Taken, run_reprieve
from priogate.preemption.shaped import exceeds_pdbs
from priogate.preemption.single import NOT_ELIGIBLE_NEVER, NOT_ELIGIBLE_TERMINATING, waiting_for_victims
from priogate.preemption.space import FreeSpace
from priogate.preemption.state import ClusterState, importance_key
from priogate.preemption.table import screen_table
from priogate.preemption.units import GROUP_PREFIX, Unit, UnitIndex, group_members, unit_index


@dataclass(frozen=True)
class GangRequest:
    group: PodGroupInfo
    pending: tuple[PodInfo, ...]  # pending members, oldest first
    needed: int  # members still to place to reach minMember
    priority: int  # gang_priority: what its members may preempt at
    never: bool  # preemptionPolicy Never on the group's class or a needed member
    priority_note: str = ""  # the members' priority differs from the group's class value


@dataclass(frozen=True)
class Problem:
    key: str  # "podgroup:ns/name", also the group's own unit key
    priority: int
    dims: tuple[int, ...]  # full-vector dimensions the members ask for
    classes: tuple[MemberClass, ...]
    nodes: tuple[str, ...]  # sorted nodes some member may use (static filters)
    now: FreeSpace  # free space with nothing removed
    base: FreeSpace  # ... plus lower-priority terminating pods gone
    failures: Mapping[str, str]


@dataclass(frozen=True)
class Solution:
    placement: Mapping[str, str]
    taken: tuple[Taken, ...]
    violating: frozenset[str]  # keys of the taken pods beyond a PDB allowance
    exhausted: bool


def _problem(
    state: ClusterState,
    request: GangRequest,
    members: Sequence[PodInfo],
    kept_off: Mapping[str, Mapping[str, str]] | None = None,
) -> Problem:
    """`kept_off`: member -> nodes its pod (anti-)affinity bars, and why (gang_fit)."""
    kept_off = kept_off or {}
    priority = request.priority
    dims = tuple(sorted({d for m in members for d, _ in need_of(state.vectors[m.key])}))
    shapes: dict[tuple, list[PodInfo]] = {}
    for member in members:
        vector = tuple(state.vectors[member.key][d] for d in dims)
        off = frozenset(kept_off.get(member.key, ()))
        shapes.setdefault((vector, static_signature(member), off), []).append(member)
    table = screen_table(state, include_opted_out=False)
    names = state.node_names
    classes, failures = [], {}
    for (vector, _, off), pods in shapes.items():
        if pods[0].node_selector or pods[0].affinity is not None:
            allowed = frozenset(n for n in names if not static_failure(pods[0], state.nodes[n].info))
        else:  # only taints and cordoning can keep the class off a node
            names_at = table.names
            barred = {names_at[i] for i in table.restricted if static_failure(pods[0], table.nodes[i].info)}
            allowed = table.name_set.difference(barred) if barred else table.name_set
        if off:
            allowed = allowed.difference(off)
        classes.append(MemberClass(vector, tuple(p.key for p in pods), allowed))
    usable = classes[0].nodes if len(classes) == 1 else frozenset().union(*(c.nodes for c in classes))
    for name in names:
        if name not in usable:
            failures[name] = static_failure(members[0], state.nodes[name].info) or kept_off.get(
                members[0].key, {}
            ).get(name, "node(s) didn't satisfy the members' pod affinity rules")
    nodes = names if len(usable) == len(names) else tuple(n for n in names if n in usable)
    own = group_members(state).get(request.group.key, frozenset())
    now = FreeSpace(state, dims, priority, own, nodes, usable, leaving=False)
    base = FreeSpace(state, dims, priority, own, nodes, usable, leaving=True)
    key = GROUP_PREFIX + request.group.key
    return Problem(key, priority, dims, tuple(classes), nodes, now, base, failures)


class Violations:
    """Which takable units' pods exceed a PDB allowance (filterPodsWithPDBViolation over the
    gang's domain): walking the takable units on the members' possible nodes in rank order,
    each PDB's allowance is used up by its first pods, and every later counted pod of it
    violates. Per PDB only where its allowance runs out is found up front (a few steps: the
    allowance is small); whether a given unit violates is answered on demand, since a decision
    asks about the units of a few nodes only."""

    def __init__(
        self, state: ClusterState, index: UnitIndex, r0: int, skip: int | None, nodes: frozenset[str]
    ) -> None:
        self.index, self.skip, self.nodes = index, skip, nodes
        self.cutoff: dict[int, int] = {}  # PDB -> position in its members of the first violator
        for i, members in index.pdb_members.items():
            allowed = state.pdbs[i].disruptions_allowed
            for j in range(bisect_left(members, r0, key=itemgetter(0)), len(members)):
                if self._counted(members[j]):
                    allowed -= 1
                    if allowed < 0:
                        self.cutoff[i] = j
                        break

    def _counted(self, entry: tuple[int, PodInfo]) -> bool:
        return entry[0] != self.skip and entry[1].node_name in self.nodes

    def _pods(self, rank: int) -> list[PodInfo]:
        """The unit's pods beyond some PDB's allowance."""
        out = []
        for i in self.index.pdbs_of_rank.get(rank, ()):
            cutoff = self.cutoff.get(i)
            if cutoff is None:
                continue
            members = self.index.pdb_members[i]
            j = max(bisect_left(members, rank, key=itemgetter(0)), cutoff)
            while j < len(members) and members[j][0] == rank:
                if self._counted(members[j]):
                    out.append(members[j][1])
                j += 1
        return out

    def rank(self, rank: int) -> bool:
        return bool(self._pods(rank))

    def pods(self, taken: Iterable[Taken]) -> frozenset[str]:
        """The keys of the taken pods that violate."""
        return frozenset(
            p.key for t in taken for p in self._pods(t.unit.rank) if any(p.key == q.key for q in t.pods)
        )


def reprieve_order(
    state: ClusterState, problem: Problem, *, include_opted_out: bool
) -> tuple[UnitIndex, Order, Violations]:
    """The victim units of one opt-out variant, their reprieve order and PDB violations."""
    index = unit_index(state, include_opted_out=include_opted_out)
    r0 = index.first_below(problem.priority)  # rank of the first unit below the gang
    own = index.rank_of.get(problem.key)
    pinned = own if own is not None and own >= r0 else None  # the gang's own placed members
    violations = Violations(state, index, r0, pinned, problem.now.node_set)
    opted = frozenset(r for r in index.opted_ranks if r >= r0) if include_opted_out else frozenset()
    return index, Order(r0, index.stride, pinned, opted, violations.rank), violations


def possible_hosts(problem: Problem) -> list[str]:
    """The nodes, in order, that some member may fit on as they are. The others cannot take
    part in a placement: a search over these tries the same nodes in the same order."""
    return sorted({n for c in problem.classes for n in problem.now.candidates(c.vector)})


def solve(
    state: ClusterState, problem: Problem, *, include_opted_out: bool, walk_all: bool = False
) -> Solution | str:
    """Victims and placement for one opt-out variant, or "infeasible"/"exhausted".
    `walk_all` skips the counting shortcut (tests compare both)."""
    index, order, violations = reprieve_order(state, problem, include_opted_out=include_opted_out)
    pinned = order.pinned
    packer = Packer(problem.classes)
    if len(problem.classes) == 1 and not walk_all:
        start = critical_start(index, order, problem.classes[0], problem.dims, problem.base)
        if start is None:
            return "infeasible"
        free, units = start.free, start.units
    else:
        free, units = _walk_everything(index, order, problem, packer, pinned, state.vectors)
        if not free:
            return "exhausted" if packer.exhausted else "infeasible"
    placement = packer.place(sorted(free), free)
    if placement is None:
        return "exhausted" if packer.exhausted else "infeasible"
    reprieve = Reprieve(problem.dims, packer, free, placement, state.vectors)
    taken = run_reprieve(reprieve, units)
    return Solution(reprieve.placement, tuple(taken), violations.pods(taken), packer.exhausted)


def _walk_everything(
    index: UnitIndex,
    order: Order,
    problem: Problem,
    packer: Packer,
    pinned: int | None,
    vectors: Mapping[str, tuple[int, ...]],
) -> tuple[dict[str, list[int]], list[Unit]]:
    """Every takable unit removed: the free space of the nodes that can then host a member
    (none if the members do not fit), and every takable unit on them in reprieve order."""
    free_all: dict[str, list[int]] = {}
    for node in problem.nodes:
        free = list(problem.base[node])
        rows = index.per_node.get(node)
        if rows is not None:
            top, row = rows.cum[len(rows.ranks)], rows.cum[bisect_right(rows.ranks, order.r0 - 1)]
            free = [f + top[d] - row[d] for f, d in zip(free, problem.dims, strict=True)]
        free_all[node] = free
    if pinned is not None:
        for pod in index.unit_at[pinned].pods:
            if pod.node_name in free_all:
                row = free_all[pod.node_name]
                free_all[pod.node_name] = [
                    f - vectors[pod.key][d] for f, d in zip(row, problem.dims, strict=True)
                ]
    domain = [n for n in problem.nodes if packer.can_host_any(n, free_all[n])]
    if packer.place(domain, free_all) is None:
        return {}, []
    in_domain = set(domain)
    units = sorted(
        (
            u
            for u in index.from_rank(order.r0)
            if u.rank != pinned and any(p.node_name in in_domain for p in u.pods)
        ),
        key=lambda u: order.position(u.rank),
    )
    return {n: free_all[n] for n in domain}, units


def gang_note(request: GangRequest) -> str:
    """Why the gang's priority is a guess or not its class's value (engine.gang_priority)."""
    return "; ".join(n for n in (request.group.priority_note, request.priority_note) if n)


def preempt_group(
    state: ClusterState, request: GangRequest, *, policy: PreemptionPolicy, explain: bool
) -> Outcome:
    key = GROUP_PREFIX + request.group.key
    note = gang_note(request)
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
    # Inter-pod (anti-)affinity and host ports: modelled as dimensions and barred nodes, or
    # refused when the engine cannot tell where a member may go (gang_fit).
    fit = gang_fit(
        state,
        members,
        group_members(state).get(request.group.key, frozenset()),
        request.priority,
        hard=policy.opt_out_mode == "hard",
    )
    if isinstance(fit, str):
        return unresolved(key, with_note(f"gang preemption refused: {fit}", note), refused=fit)
    state = fit.state
    problem = _problem(state, request, members, fit.barred)
    if Packer(problem.classes).place(possible_hosts(problem), problem.now) is not None:
        return fits(key)
    variants = [False]
    if policy.opt_out_mode == "soft" and any(node.has_opted_out for node in state.nodes.values()):
        variants.append(True)
    for include_opted_out in variants:
        solution = solve(state, problem, include_opted_out=include_opted_out)
        if isinstance(solution, Solution):
            taken = [p for t in solution.taken for p in t.pods]
            if policy.pdb_mode == "strict" and exceeds_pdbs(state, taken):
                # The reprieve already puts PDB-violating units back first: what it cannot
                # avoid, strict mode refuses (--pdb-mode strict).
                reason = (
                    f"{PDB_STRICT_REASON}: placing {request.needed} member(s) takes {len(taken)} victim(s), "
                    "some beyond a PDB's allowance"
                )
                return unresolved(key, with_note(reason, note))
            return _decision(problem, request, solution, opted_out=include_opted_out, explain=explain)
    why = "the placement search ran out of budget" if solution == "exhausted" else "not enough room"
    reason = (
        f"cannot place all {request.needed} needed member(s) even after preempting every "
        f"lower-priority pod ({why}; {len(problem.nodes)} node(s) pass the members' node filters)"
    )
    return unresolved(key, with_note(reason, note), dict(problem.failures) if explain else None)


def _decision(
    problem: Problem, request: GangRequest, solution: Solution, *, opted_out: bool, explain: bool
) -> Outcome:
    victims = tuple(sorted((p for t in solution.taken for p in t.pods), key=importance_key))
    used_nodes = sorted(set(solution.placement.values()))
    if victims:
        wholes = sum(1 for t in solution.taken if t.whole and t.unit.group is not None)
        surplus = sum(len(t.pods) for t in solution.taken if not t.whole)
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
                nodes[name] = "not used: the members fit elsewhere with lower-priority or fewer victims"
    return Outcome(
        preemptor=problem.key,
        status="preempt",
        reason=with_note(reason, gang_note(request)),
        placements=dict(sorted(solution.placement.items())),
        victims=victims,
        nodes=nodes,
        clear_below=request.priority,
    )
