"""Which node a single pod should preempt on: screening every node, then kube-scheduler's
node order over the candidates, evaluated best-first with exact lower bounds.

Screening costs a few bisects per node thanks to the per-node aggregates. Full victim
selection runs only on candidates whose lower-bound key could still beat the best node found
so far, so the answer is the one an exhaustive evaluation of every node gives (no sampling),
at a fraction of the cost on large clusters.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from controller.preemption.fit import Need, insufficient_message, static_failure
from controller.preemption.snapshot import PodInfo
from controller.preemption.state import ClusterState, NodeState, Ranked
from controller.preemption.victims import (
    PRIORITY_SHIFT,
    NodeVictims,
    first_victim,
    select_victims,
    violating_positions,
)

NOT_HELPFUL = "even after preempting every lower-priority pod"
NO_VICTIMS = "and no lower-priority pod to preempt"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the preemptor fits once every lower-priority possible victim is gone."""

    node: NodeState
    ranked: Ranked
    start: int  # ranked[start:] are the possible victims (priority below the preemptor's)
    slack: tuple[int, ...]  # per need dimension: free minus request, nothing removed


@dataclass
class Screening:
    fits_on: str = ""  # a node where the pod fits right now, if any
    candidates: list[Candidate] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # node -> why it cannot help


def nominated_load(
    state: ClusterState, node: str, priority: int, exclude: Collection[str], need: Need
) -> list[int]:
    """Requests of the pods nominated to `node` with priority >= `priority`: the scheduler
    holds their space (the design's "assume nominated pods are running")."""
    load = [0] * len(need)
    for pod in state.nominated.get(node, ()):
        if pod.priority < priority:
            break  # sorted most important first
        if pod.key in exclude:
            continue
        vec = state.vectors[pod.key]
        for k, (d, _) in enumerate(need):
            load[k] += vec[d]
    return load


def screen_nodes(
    state: ClusterState,
    pod: PodInfo,
    need: Need,
    priority: int,
    *,
    include_opted_out: bool,
    exclude_nominated: Collection[str] = (),
) -> Screening:
    """Sort every node into fits-now, preemption candidate, or cannot-help (with why)."""
    result = Screening()
    exclude = exclude_nominated or (pod.key,)
    for name in state.node_names:
        node = state.nodes[name]
        why = static_failure(pod, node.info)
        if why:
            result.failures[name] = why
            continue
        alloc, requested = node.alloc, node.requested
        held = nominated_load(state, name, priority, exclude, need) if name in state.nominated else None
        free = [alloc[d] - requested[d] - (held[k] if held else 0) for k, (d, _) in enumerate(need)]
        if all(amount <= free[k] for k, (_, amount) in enumerate(need)):
            result.fits_on = name
            return result
        leaving = node.terminating
        if len(leaving):
            t, last = leaving.below(priority), leaving.cum[len(leaving)]
            row = leaving.cum[t]
            for k, (d, _) in enumerate(need):
                free[k] += last[d] - row[d]
        ranked = node.victims_all if include_opted_out else node.victims_strict
        start = ranked.below(priority)
        last, row = ranked.cum[len(ranked)], ranked.cum[start]
        short = [d for k, (d, amount) in enumerate(need) if amount > free[k] + last[d] - row[d]]
        if short:
            lack = insufficient_message(short, state.dims)
            no_victims = start == len(ranked)
            result.failures[name] = f"{lack}, {NO_VICTIMS}" if no_victims else f"{lack} {NOT_HELPFUL}"
            continue
        slack = tuple(free[k] - amount for k, (_, amount) in enumerate(need))
        result.candidates.append(Candidate(node, ranked, start, slack))
    return result


def lower_bound(candidate: Candidate, need: Need, opted_out_first: bool) -> tuple[tuple, int]:
    """A key no worse than the candidate's exact key, and the first-victim position.

    Any victim set that makes room must include a pod at least as important as the first
    victim of the importance-order reprieve, so that pod's priority bounds the highest
    victim priority from below; on nodes without PDB-covered or opted-out pods the reprieve
    is in importance order and the bound is exact up to the sum and the count."""
    ranked, node = candidate.ranked, candidate.node
    j = first_victim(ranked, candidate.start, need, candidate.slack)
    plain = not node.has_pdb_pods and not (opted_out_first and node.has_opted_out)
    if j == len(ranked):  # lower-priority pods already terminating make room: exact
        return NodeVictims(node.name, (), 0, 0).key, j
    first = ranked.pods[j]
    start_bound = -first.start_time if plain else float("-inf")
    return (0, 0, first.priority, first.priority + PRIORITY_SHIFT, 1, start_bound, node.name), j


def evaluate(state: ClusterState, candidate: Candidate, need: Need, opted_out_first: bool) -> NodeVictims:
    node = candidate.node
    violating: set[int] = set()
    if node.has_pdb_pods:
        violating = violating_positions(candidate.ranked, candidate.start, state.pdbs, state.pdb_matches)
    return select_victims(
        node.name, candidate.ranked, candidate.start, need, candidate.slack, violating, opted_out_first
    )


def choose_node(
    state: ClusterState,
    candidates: Sequence[Candidate],
    need: Need,
    *,
    opted_out_first: bool,
    exhaustive: bool,
) -> tuple[NodeVictims | None, dict[str, NodeVictims]]:
    """The best candidate by kube-scheduler's node order, and every node evaluated exactly.

    Candidates are evaluated in lower-bound order and the search stops once no remaining
    bound can beat the best exact key (bounds include the node name, so they never tie).
    `exhaustive` evaluates them all, for --explain."""
    queue = []
    for index, candidate in enumerate(candidates):
        bound, _ = lower_bound(candidate, need, opted_out_first)
        queue.append((bound, index))
    heapq.heapify(queue)
    best: NodeVictims | None = None
    evaluated: dict[str, NodeVictims] = {}
    while queue:
        bound, index = heapq.heappop(queue)
        if best is not None and not exhaustive and bound > best.key:
            break
        result = evaluate(state, candidates[index], need, opted_out_first)
        evaluated[result.node] = result
        if best is None or result.key < best.key:
            best = result
    return best, evaluated
