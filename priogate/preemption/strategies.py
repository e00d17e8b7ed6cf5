"""A single pod's preemption under the optional policies: victim selection strategies tried
in the admin's order (YuniKorn's preemption_victim_pods_selection_strategy), each a fallback
for the ones before it; the first that finds victims decides.

- single: one victim whose request deviates from the preemptor's by at most
  --single-victim-deviation percent in every dimension the preemptor asks for (the largest
  relative difference counts), closest first; then PDB-respecting first (best-effort mode),
  then the victim class taken first, lower priority, lower QoS, later start, node, name;
- multiple: per node, victims largest first (their requests relative to the preemptor's)
  until the preemptor fits, then any victim that can come back does, most important first;
  at most --max-victims of them; the node with the fewest victims wins, then kube-scheduler's
  node order;
- kube-scheduler: kube-scheduler's reprieve and node order, with the victim order the
  policies set (shaped.py).

single and multiple take pods one by one: a PodGroup member only while its group keeps
minMember placed (--gang-aware-victims), never a whole group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from priogate.preemption.nodes import Candidate, Screening, choose_node
from priogate.preemption.policy import KUBE_SCHEDULER, MULTIPLE, SINGLE, PreemptionPolicy
from priogate.preemption.records import PodInfo
from priogate.preemption.shaped import (
    DEVIATION,
    FAILURE_TEXT,
    GANG,
    LIMIT,
    PDB,
    ROOM,
    Failure,
    Shaping,
    evaluate,
    exceeds_pdbs,
)
from priogate.preemption.state import importance_key
from priogate.preemption.victims import NodeVictims, node_victims

COUNT = 5  # the victim count's place in a node order key (victims.node_victims)


@dataclass(frozen=True, slots=True)
class Choice:
    """A strategy's decision: the node's victims and how the strategy explains them."""

    victims: NodeVictims
    how: str
    evaluated: dict[str, NodeVictims | Failure]
    notes: dict[str, str] = field(default_factory=dict)  # --explain text per node, if set


def candidate_pods(shaping: Shaping, candidate: Candidate, held: set[str] | None = None) -> list[PodInfo]:
    """The node's possible victims one by one, for single and multiple: items of one pod,
    and the members on this node of groups with surplus (their count is checked later)."""
    pods: list[PodInfo] = []
    for item in shaping.items(candidate, held):
        if len(item.pods) == 1 and item.surplus == 0:
            pods.append(item.pods[0])
        elif item.surplus > 0:
            pods.extend(item.here)
    return pods


def within_groups(shaping: Shaping, victims: Sequence[PodInfo]) -> bool:
    """No group loses more than its surplus (gang-aware victims)."""
    if not shaping.policy.gang_aware_victims:
        return True
    lost: dict[str, int] = {}
    for pod in victims:
        if pod.group in shaping.state.groups:
            lost[pod.group] = lost.get(pod.group, 0) + 1
            found = shaping.group(pod.group)
            if found is None or lost[pod.group] > found[1]:
                return False
    return True


def _key(shaping: Shaping, node: str, victims: tuple[PodInfo, ...]) -> NodeVictims:
    """The victims with kube-scheduler's node order key (shaped.evaluate's counts)."""
    violations = 0 if shaping.policy.pdb_mode == "strict" else pdb_violations_of(shaping, victims)
    owners = sum(1 for p in victims if shaping.is_owner(p)) if shaping.policy.victim_classes else 0
    return node_victims(node, victims, violations, sum(1 for p in victims if p.opted_out), owners)


def pdb_violations_of(shaping: Shaping, victims: Sequence[PodInfo]) -> int:
    state = shaping.state
    used: dict[int, int] = {}
    bad = 0
    for pod in victims:
        hit = False
        for i in state.pdb_matches.get(pod.key, ()):
            used[i] = used.get(i, 0) + 1
            hit = hit or used[i] > state.pdbs[i].disruptions_allowed
        bad += hit
    return bad


def deviation(shaping: Shaping, victim: PodInfo) -> float:
    """The victim's largest relative difference from the preemptor's request, in percent,
    over the dimensions the preemptor asks a positive amount of."""
    vec = shaping.state.vectors[victim.key]
    worst = 0.0
    for d, amount in shaping.need:
        if amount > 0:
            worst = max(worst, abs(vec[d] - amount) * 100.0 / amount)
    return worst


def closest_victim(shaping: Shaping, candidate: Candidate) -> tuple[tuple, PodInfo, float] | None:
    """The single strategy on one node: of the victims that alone free enough, the one whose
    request deviates least from the preemptor's (within --single-victim-deviation), as (rank,
    pod, deviation); None when there is none."""
    limit = shaping.policy.single_victim_deviation
    best: tuple[tuple, PodInfo, float] | None = None
    for pod in candidate_pods(shaping, candidate):
        vec = shaping.state.vectors[pod.key]
        if any(s + vec[d] < 0 for s, (d, _) in zip(candidate.slack, shaping.need, strict=True)):
            continue
        off = deviation(shaping, pod)
        if off > limit or not within_groups(shaping, (pod,)):
            continue
        rank = (
            pdb_violations_of(shaping, (pod,)),
            off,
            shaping.take_rank(pod),
            pod.priority,
            shaping.qos(pod),
            -pod.start_time,
            pod.key,
        )
        if best is None or rank < best[0]:
            best = (rank, pod, off)
    return best


def single(shaping: Shaping, screening: Screening) -> Choice | list[Failure]:
    limit = shaping.policy.single_victim_deviation
    per_node: dict[str, tuple[tuple, PodInfo, float]] = {}  # node -> its closest victim
    failures: list[Failure] = []
    for _, i in screening.bounds:
        candidate = screening.candidate(i)
        node = candidate.node.name
        largest = candidate.ranked.largest
        if any(s + largest[d] < 0 for s, (d, _) in zip(candidate.slack, shaping.need, strict=True)):
            failures.append(Failure(node, DEVIATION))  # no one victim frees enough here
            continue
        found = closest_victim(shaping, candidate)
        if found is not None:
            per_node[node] = found
        if node not in per_node:
            failures.append(Failure(node, DEVIATION))
    if not per_node:
        return failures
    # kube-scheduler's tie-breaks first, then the node's name, then the pod's
    _, pod, off = min(per_node.values(), key=lambda f: (*f[0][:-1], f[1].node_name, f[0][-1]))
    how = (
        f"the single strategy: its request deviates {off:.1f}% from the preemptor's "
        f"(at most {limit:g}%), the closest of any node"
    )
    notes = {f.node: f"under the policies: {FAILURE_TEXT[f.kind]}" for f in failures}
    for node, (_, other, other_off) in per_node.items():
        if other is not pod:
            notes[node] = f"lost to {pod.node_name}: its closest victim {other.key} deviates {other_off:.1f}%"
    notes[pod.node_name] = "chosen"
    return Choice(_key(shaping, pod.node_name, (pod,)), how, {}, notes)


def _size(shaping: Shaping, pod: PodInfo) -> float:
    vec = shaping.state.vectors[pod.key]
    return sum(vec[d] / amount for d, amount in shaping.need if amount > 0)


def fewest_victims(shaping: Shaping, candidate: Candidate) -> tuple[PodInfo, ...] | Failure:
    node = candidate.node.name
    state = shaping.state
    dims = [d for d, _ in shaping.need]
    room = list(candidate.slack)
    held: set[str] = set()
    pods = sorted(
        candidate_pods(shaping, candidate, held),
        key=lambda p: (
            -_size(shaping, p),
            shaping.take_rank(p),
            p.priority,
            shaping.qos(p),
            -p.start_time,
            p.key,
        ),
    )
    taken: list[PodInfo] = []
    strict = shaping.policy.pdb_mode == "strict"
    for pod in pods:
        if min(room) >= 0:
            break
        if strict and exceeds_pdbs(state, [*taken, pod]):
            held.add(PDB)
            continue
        if not within_groups(shaping, [*taken, pod]):
            held.add(GANG)
            continue
        vec = state.vectors[pod.key]
        if all(vec[d] == 0 for d, r in zip(dims, room, strict=True) if r < 0):
            continue  # frees nothing that is short
        taken.append(pod)
        for k, d in enumerate(dims):
            room[k] += vec[d]
    if min(room) < 0:
        return Failure(node, PDB if PDB in held else GANG if GANG in held else ROOM)
    for pod in sorted(taken, key=importance_key):  # give back what is not needed
        vec = state.vectors[pod.key]
        if all(vec[d] <= r for d, r in zip(dims, room, strict=True)):
            taken.remove(pod)
            for k, d in enumerate(dims):
                room[k] -= vec[d]
    if shaping.policy.max_victims and len(taken) > shaping.policy.max_victims:
        return Failure(node, LIMIT)
    return tuple(sorted(taken, key=importance_key))


def multiple(shaping: Shaping, screening: Screening, explain: bool = False) -> Choice | list[Failure]:
    """Nodes in the order of their lower bounds (nodes.py: at least `count` victims, and a key
    no smaller than the bound), so the search stops once no bound can beat the best found."""
    best: tuple | None = None
    chosen: NodeVictims | None = None
    failures: list[Failure] = []
    evaluated: dict[str, NodeVictims | Failure] = {}
    for bound, i in sorted(screening.bounds, key=lambda b: (b[0][COUNT], b[0])):
        if best is not None and not explain and (bound[COUNT], bound) > best:
            break
        candidate = screening.candidate(i)
        result = fewest_victims(shaping, candidate)
        if isinstance(result, Failure):
            failures.append(result)
            evaluated[result.node] = result
            continue
        victims = _key(shaping, candidate.node.name, result)
        evaluated[victims.node] = victims
        rank = (len(victims.victims), victims.key)
        if best is None or rank < best:
            best, chosen = rank, victims
    if chosen is None:
        return failures
    limit = f", at most {shaping.policy.max_victims}" if shaping.policy.max_victims else ""
    how = f"the multiple strategy: the fewest victims of any node{limit}"
    return Choice(chosen, how, evaluated)


def kube_scheduler(shaping: Shaping, screening: Screening, explain: bool) -> Choice | list[Failure]:
    best, evaluated = choose_node(
        shaping.state,
        screening,
        shaping.need,
        opted_out_first=shaping.include_opted_out,
        exhaustive=explain,
        evaluator=lambda candidate: evaluate(shaping, candidate),
    )
    if best is None:
        return [r for r in evaluated.values() if isinstance(r, Failure)]
    how = f"best of {len(screening.bounds)} candidate node(s) by kube-scheduler's node order"
    return Choice(best, how, evaluated)


def decide(
    shaping: Shaping, screening: Screening, policy: PreemptionPolicy, explain: bool
) -> tuple[str, Choice | list[Failure]]:
    """The first strategy that finds victims, or every strategy's failures."""
    failures: list[Failure] = []
    for name in policy.victim_selection:
        if name == SINGLE:
            result = single(shaping, screening)
        elif name == MULTIPLE:
            result = multiple(shaping, screening, explain)
        else:
            assert name == KUBE_SCHEDULER
            result = kube_scheduler(shaping, screening, explain)
        if isinstance(result, Choice):
            return name, result
        failures.extend(result)
    return "", failures


def summarize(failures: Sequence[Failure]) -> str:
    """ "2 node(s) only by violating a PodDisruptionBudget (--pdb-mode strict), ..."; the
    worst reason per node (a node failing several strategies is counted once)."""
    per_node: dict[str, str] = {}
    severity = (PDB, GANG, LIMIT, DEVIATION, ROOM)
    for failure in failures:
        known = per_node.get(failure.node)
        if known is None or severity.index(failure.kind) < severity.index(known):
            per_node[failure.node] = failure.kind
    counts: dict[str, int] = {}
    for kind in per_node.values():
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{counts[k]} node(s) {FAILURE_TEXT[k]}" for k in severity if k in counts)
