"""Which node a single pod should preempt on: every node screened, then kube-scheduler's node
order over the candidates, evaluated best-first with exact lower bounds.

Screening a node is a few lookups into its precomputed aggregates, and yields a lower bound
of the node's key. A node short of `s` in some dimension whose largest possible victim has
`l` there needs at least c = ceil(s / l) victims. Any c of its possible victims include one
at least as important as the c-th least important one (the pivot), so the highest victim
priority is at least the pivot's and the priority sum at least that of the c least
important pods; and when the highest victim priority equals the pivot's, enough victims of
that priority are taken that the earliest of them started no later than the pivot.
Candidates are then fully evaluated in bound order until no bound can beat the best key
found: the answer is the one an evaluation of every node gives (no sampling), for less work.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from controller.preemption.fit import Need, insufficient_message, static_failure
from controller.preemption.snapshot import PodInfo
from controller.preemption.state import ClusterState, NodeState, Ranked
from controller.preemption.victims import PRIORITY_SHIFT, NodeVictims, node_victims, select_victims
from controller.preemption.victims import violating_positions as _violating

NOT_HELPFUL = "even after preempting every lower-priority pod"
NO_VICTIMS = "and no lower-priority pod to preempt"


class Candidate(NamedTuple):
    """A node where the preemptor fits once every lower-priority possible victim is gone.
    (A NamedTuple: one is built per node per decision, and these are cheap to make.)"""

    bound: tuple  # no better than the node's exact key
    node: NodeState
    ranked: Ranked
    start: int  # ranked[start:] are the possible victims (priority below the preemptor's)
    slack: list[int]  # per need dimension: free minus request, nothing removed


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
    state: ClusterState, pod: PodInfo, need: Need, priority: int, *, include_opted_out: bool
) -> Screening:
    """Sort every node into fits-now, preemption candidate, or cannot-help (with why).

    This loop runs once per node per decision, so it is written flat: one pass over the
    requested dimensions computes the fit now, the slack once lower-priority terminating pods
    are gone, whether removing every possible victim is enough, and the bound."""
    result = Screening()
    constrained = bool(pod.node_selector) or pod.affinity is not None
    nominated = state.nominated
    below = -priority
    no_held = (0,) * len(need)
    for name, node, restricted, free, leaving, strict, everything in state.rows:
        if constrained or restricted:
            why = static_failure(pod, node.info)
            if why:
                result.failures[name] = why
                continue
        held = nominated_load(state, name, priority, (pod.key,), need) if name in nominated else no_held
        ranked = everything if include_opted_out else strict
        start = bisect_right(ranked.neg_priority, below)
        cum = ranked.cum
        last, row = cum[-1], cum[start]
        if leaving is not None:
            gone_last, gone_row = leaving.cum[-1], leaving.cum[bisect_right(leaving.neg_priority, below)]
        else:
            gone_last = gone_row = None
        fits_now = True
        short: list[int] = []
        slack: list[int] = []
        count = 1
        for (d, amount), reserved in zip(need, held, strict=True):
            room = free[d] - amount - reserved
            if room < 0:
                fits_now = False
            if gone_last is not None:  # lower-priority pods already terminating are leaving
                room += gone_last[d] - gone_row[d]
            slack.append(room)
            if room < 0:
                if room + last[d] - row[d] < 0:
                    short.append(d)
                else:
                    count = max(count, -(room // ranked.largest[d]))  # ceil(-room / largest)
        if fits_now:
            result.fits_on = name
            return result
        if short:
            lack = insufficient_message(short, state.dims)
            result.failures[name] = (
                f"{lack}, {NO_VICTIMS}" if start == len(ranked) else f"{lack} {NOT_HELPFUL}"
            )
            continue
        if min(slack) >= 0:  # lower-priority pods already terminating make room: exact
            bound = node_victims(name, (), 0, 0).key
        else:
            # Any `count` victims include one at least as important as the count-th least
            # important pod, and sum at least the priorities of the `count` least important.
            pivot = ranked.pods[-count]
            total = ranked.priority_tail[-count - 1] + PRIORITY_SHIFT * count
            bound = (0, 0, pivot.priority, total, count, -pivot.start_time, name)
        result.candidates.append(Candidate(bound, node, ranked, start, slack))
    return result


def evaluate(state: ClusterState, candidate: Candidate, need: Need, opted_out_first: bool) -> NodeVictims:
    violating = _violating(candidate.ranked, candidate.start, state.pdbs)
    return select_victims(
        candidate.node.name,
        candidate.ranked,
        candidate.start,
        need,
        candidate.slack,
        violating,
        opted_out_first,
    )


def choose_node(
    state: ClusterState,
    candidates: Sequence[Candidate],
    need: Need,
    *,
    opted_out_first: bool,
    exhaustive: bool,
) -> tuple[NodeVictims, dict[str, NodeVictims]]:
    """The best candidate by kube-scheduler's node order, and the candidates evaluated.

    Bounds include the node name, so no two tie and the first bound above the best key ends
    the search. `exhaustive` evaluates every candidate (for --explain)."""
    queue = [(c.bound, i) for i, c in enumerate(candidates)]
    heapq.heapify(queue)
    evaluated: dict[str, NodeVictims] = {}
    best: NodeVictims | None = None
    while queue:
        bound, index = heapq.heappop(queue)
        if best is not None and not exhaustive and bound > best.key:
            break
        result = evaluate(state, candidates[index], need, opted_out_first)
        evaluated[result.node] = result
        if best is None or result.key < best.key:
            best = result
    if best is None:
        raise ValueError("choose_node needs at least one candidate")
    return best, evaluated
