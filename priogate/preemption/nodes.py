"""Which node a single pod should preempt on: every node screened, then kube-scheduler's node
order over the candidates, evaluated best-first with exact lower bounds.

Screening works on the state's column table (see table): per requested dimension, the slack
(free minus request) of every node, then the same plus what removing every lower-priority
possible victim frees. A node where the slack is >= 0 everywhere fits now; one where the
second is >= 0 everywhere is a candidate.

Each candidate gets a lower bound of its key. A node short of `s` in some dimension whose
largest possible victim has `l` there needs at least c = ceil(s / l) victims. Any c of its
possible victims include one at least as important as the c-th least important one (the
pivot), so the highest victim priority is at least the pivot's and the priority sum at
least that of the c least important pods; and when the highest victim priority equals the
pivot's, enough victims of that priority are taken that the earliest of them started no
later than the pivot. Candidates are fully evaluated in bound order until no bound can beat
the best key found: the answer is the one an evaluation of every node gives (no
sampling), for much less work.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, sub
from typing import Any

from priogate.preemption.fit import PODS_DIM, Need, insufficient_message, static_failure
from priogate.preemption.records import PodInfo
from priogate.preemption.spread_fit import SpreadPlan, spread_plan
from priogate.preemption.state import ClusterState, NodeState, Ranked
from priogate.preemption.table import PIVOTS, ScreenTable, screen_table
from priogate.preemption.victims import PRIORITY_SHIFT, NodeVictims, node_victims, select_victims
from priogate.preemption.victims import violating_positions as _violating

NOT_HELPFUL = "even after preempting every lower-priority pod"
NO_VICTIMS = "and no lower-priority pod to preempt"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the preemptor fits once every lower-priority possible victim is gone."""

    node: NodeState
    ranked: Ranked
    start: int  # ranked[start:] are the possible victims (priority below the preemptor's)
    slack: list[int]  # per need dimension: free minus request, nothing removed
    extra: Need = ()  # virtual dimensions after the state's (topology spread, spread_fit.py)


@dataclass
class Screening:
    table: ScreenTable
    priority: int
    slack: list[array] = field(default_factory=list)  # per need dimension, per node
    fits_on: str = ""  # a node where the pod fits right now, if any
    bounds: list[tuple[tuple, int]] = field(default_factory=list)  # (lower bound, node index)
    failures: dict[str, str] = field(default_factory=dict)  # node -> why it cannot help
    spread: SpreadPlan | None = None  # the preemptor's hard topology spread constraints
    augment: bool = True  # candidates carry the spread dimensions (kube-scheduler's victims)

    def candidate(self, i: int) -> Candidate:
        ranked = self.table.ranked[i]
        node = self.table.nodes[i]
        slack = [c[i] for c in self.slack]
        if self.spread is None or not self.augment:
            return Candidate(node, ranked, ranked.below(self.priority), slack)
        extended, extra, more = self.spread.augment(i, node, ranked, self.table.width)
        return Candidate(node, extended, ranked.below(self.priority), slack + more, extra)


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


def _nonnegative(columns: list[array]) -> list[int]:
    """Indices where every column is >= 0."""
    return [i for i, row in enumerate(zip(*columns, strict=True)) if min(row) >= 0]


def screen_nodes(
    state: ClusterState,
    pod: PodInfo,
    need: Need,
    priority: int,
    *,
    include_opted_out: bool,
    want_failures: bool = False,
) -> Screening:
    """Sort every node into fits-now, preemption candidate, or cannot-help.

    Why a node cannot help is worked out only when asked (`want_failures`) or when no node
    can: it is text for humans, not needed to decide."""
    table = screen_table(state, include_opted_out=include_opted_out)
    spread = spread_plan(state, pod, table, priority)  # None unless the pod has hard ones
    result = Screening(table, priority, spread=spread)
    count = len(table.names)
    slack = [array("q", map(sub, table.free[d], repeat(amount, count))) for d, amount in need]
    for name in state.nominated:
        held = nominated_load(state, name, priority, (pod.key,), need)
        i = table.index[name]
        for column, amount in zip(slack, held, strict=True):
            column[i] -= amount
    result.slack = slack
    constrained = bool(pod.node_selector) or pod.affinity is not None
    restricted = table.restricted

    def allowed(i: int) -> bool:
        return not ((constrained or i in restricted) and static_failure(pod, table.nodes[i].info))

    for i in _nonnegative(slack):
        if allowed(i) and (spread is None or spread.fits_now(i, table.nodes[i])):
            result.fits_on = table.names[i]
            return result
    for i in table.leaving:  # lower-priority terminating pods are leaving anyway
        leaving = table.nodes[i].terminating
        last, row = leaving.cum[len(leaving)], leaving.cum[leaving.below(priority)]
        for column, (d, _) in zip(slack, need, strict=True):
            column[i] += last[d] - row[d]
    removable = table.removable(priority)
    totals = [array("q", map(add, column, removable[d])) for column, (d, _) in zip(slack, need, strict=True)]
    candidates = _nonnegative(totals)
    if constrained:
        candidates = [i for i in candidates if allowed(i)]
    elif restricted:
        candidates = [i for i in candidates if i not in restricted or allowed(i)]
    if spread is not None:
        candidates = spread.helpful(candidates)
    result.bounds = _bounds(table, candidates, slack, need, spread)
    if want_failures or not result.bounds:
        bounded = {i for _, i in result.bounds}
        result.failures = _failures(state, pod, need, table, totals, removable, bounded, spread)
    return result


def _bounds(
    table: ScreenTable, candidates: list[int], slack: list[array], need: Need, spread: SpreadPlan | None
) -> list[tuple[tuple, int]]:
    """(lower bound of the key, node index) per candidate (see the module docstring).
    Column by column where possible: this runs for nearly every node of a full cluster."""
    counts = [1] * len(candidates)
    for column, (d, _) in zip(slack, need, strict=True):
        largest = table.largest[d]
        # ceil(-s / largest) where short of s, else 1
        needed = [-(column[i] // largest[i]) if column[i] < 0 else 1 for i in candidates]
        counts = list(map(max, counts, needed))
    names, pivots, starts, tails = table.names, table.pivot_priority, table.pivot_start, table.tail_priority
    bounds = []
    for i, count in zip(candidates, counts, strict=True):
        if count <= PIVOTS:
            c = count - 1
            priority, start, tail = pivots[c][i], starts[c][i], tails[c][i]
        else:
            ranked = table.ranked[i]
            pivot = ranked.pods[-count]
            priority, start, tail = (
                pivot.priority,
                pivot.start_time,
                ranked.priority_tail[len(ranked) - count],
            )
        bounds.append(((0, 0, 0, priority, tail + PRIORITY_SHIFT * count, count, -start, names[i]), i))
    for j, i in enumerate(candidates):
        if (
            i in table.leaving_set
            and min(column[i] for column in slack) >= 0
            and (spread is None or spread.fits_now(i, table.nodes[i]))
        ):
            # lower-priority pods already terminating make room: the exact key, no victims
            bounds[j] = (node_victims(names[i], (), 0, 0).key, i)
    return bounds


def _failures(
    state: ClusterState,
    pod: PodInfo,
    need: Need,
    table: ScreenTable,
    totals: list[array],
    removable: tuple[array, ...],
    candidates: set[int],
    spread: SpreadPlan | None,
) -> dict[str, str]:
    failures = {}
    for i, name in enumerate(table.names):
        if i in candidates:
            continue
        why = static_failure(pod, table.nodes[i].info)
        short = [d for column, (d, _) in zip(totals, need, strict=True) if column[i] < 0]
        if not why and spread is not None and (not short or i in spread.unlabelled):
            why = spread.why_not(i)
            if i not in spread.unlabelled:
                why = f"{why}, {NO_VICTIMS}" if removable[PODS_DIM][i] == 0 else f"{why} {NOT_HELPFUL}"
        if not why:
            lack = insufficient_message(short, state.dims)
            why = f"{lack}, {NO_VICTIMS}" if removable[PODS_DIM][i] == 0 else f"{lack} {NOT_HELPFUL}"
        failures[name] = why
    return failures


def evaluate(state: ClusterState, candidate: Candidate, need: Need, opted_out_first: bool) -> NodeVictims:
    violating = _violating(candidate.ranked, candidate.start, state.pdbs)
    return select_victims(
        candidate.node.name,
        candidate.ranked,
        candidate.start,
        need + candidate.extra,
        candidate.slack,
        violating,
        opted_out_first,
    )


def choose_node(
    state: ClusterState,
    screening: Screening,
    need: Need,
    *,
    opted_out_first: bool,
    exhaustive: bool,
    evaluator: Callable[[Candidate], NodeVictims | Any] | None = None,
) -> tuple[NodeVictims | None, dict[str, Any]]:
    """The best candidate by kube-scheduler's node order, and the candidates evaluated.

    Bounds include the node name, so no two tie and the first bound above the best key ends
    the search. `exhaustive` evaluates every candidate (for --explain). `evaluator` replaces
    kube-scheduler's victim selection (the policies' shaped.evaluate): it returns the node's
    victims, or anything else for a node that cannot be used (kept in the evaluated map);
    its victims must be possible victims of the node, so the bounds still hold."""
    queue = list(screening.bounds)
    heapq.heapify(queue)
    evaluated: dict[str, Any] = {}
    best: NodeVictims | None = None
    while queue:
        bound, i = heapq.heappop(queue)
        if best is not None and not exhaustive and bound > best.key:
            break
        candidate = screening.candidate(i)
        if evaluator is None:
            result = evaluate(state, candidate, need, opted_out_first)
        else:
            result = evaluator(candidate)
        evaluated[candidate.node.name] = result
        if isinstance(result, NodeVictims) and (best is None or result.key < best.key):
            best = result
    if best is None and evaluator is None:
        raise ValueError("choose_node needs at least one candidate")
    return best, evaluated
