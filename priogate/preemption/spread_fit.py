"""Hard topology spread during single-pod preemption, as kube-scheduler's PodTopologySpread
filter sees it inside SelectVictimsOnNode (pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go): PreFilter counts matching pods per domain over every node, RemovePod and
AddPod move the count of the evaluated node's domain as victims are removed and reprieved, and
Filter requires `count + selfMatch - globalMin <= maxSkew` (podtopologyspread/filtering.go).

Only the evaluated node's domain changes during its evaluation, so per node and constraint the
filter reduces to a threshold: with `c` the domain's count, `o` the smallest count among the
other domains (0 while fewer domains than minDomains exist, unbounded when there is none),
`n` the matching pods nominated to the node with priority >= the preemptor's (the first pass
of RunFilterPluginsWithNominatedPods adds them; the second pass, without them, is then implied)
and `s` 1 if the preemptor matches its own selector,

    skew = c + n + s - min(o, c + n) <= maxSkew   <=>   removed >= c + n + s - o - maxSkew

where `removed` counts the matching victims taken off the node. That is a resource dimension
in all but name: each possible victim "frees" 1 if it matches, and the node's "slack" is minus
the removals required. The plan adds one such virtual dimension per constraint to a candidate's
vectors, so the reprieve loop (victims.select_victims) keeps a reprieved matching pod only when
the constraint still holds, exactly as upstream re-runs the filter per reprieve.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from priogate.preemption.fit import Need
from priogate.preemption.selectors import BLOCKING_EFFECTS, node_affinity_matches, tolerated
from priogate.preemption.snapshot import NodeInfo, PodInfo
from priogate.preemption.spread import SpreadConstraint
from priogate.preemption.state import ClusterState, NodeState, Ranked

# podtopologyspread.ErrReasonConstraintsNotMatch and ErrReasonNodeLabelNotMatch
CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
NODE_LABEL_NOT_MATCH = CONSTRAINTS_NOT_MATCH + " (missing required label)"


def _affinity_ok(pod: PodInfo, info: NodeInfo) -> bool:
    """The pod's required node affinity, nodeSelector included (GetRequiredNodeAffinity)."""
    labels = info.labels
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return pod.affinity is None or node_affinity_matches(pod.affinity, info.name, labels)


def _taints_ok(pod: PodInfo, info: NodeInfo) -> bool:
    """No untolerated NoSchedule/NoExecute taint (DoNotScheduleTaintsFilterFunc)."""
    return all(t.effect not in BLOCKING_EFFECTS or tolerated(pod.tolerations, t) for t in info.taints)


def _included(pod: PodInfo, info: NodeInfo, constraint: SpreadConstraint) -> bool:
    """matchNodeInclusionPolicies (node inclusion policies are GA: always on)."""
    if constraint.honor_affinity and not _affinity_ok(pod, info):
        return False
    return not (constraint.honor_taints and not _taints_ok(pod, info))


class SpreadPlan:
    """One preemptor's hard constraints against one cluster state, per node of `nodes`."""

    def __init__(self, state: ClusterState, pod: PodInfo, nodes: list[NodeState], priority: int) -> None:
        self.pod = pod
        self.constraints = pod.spread
        self.state = state
        self.priority = priority
        self.nodes = nodes
        self.index = {node.name: i for i, node in enumerate(nodes)}
        ns = pod.namespace
        keys = [c.topology_key for c in self.constraints]
        width = len(self.constraints)
        counts: list[dict[str, int]] = [{} for _ in range(width)]
        # per node: None when a topology key is missing, else per constraint (domain, included)
        self.domains: list[tuple[tuple[str, bool], ...] | None] = []
        # per node: pod key -> per constraint 1 if removing the pod lowers the domain's count
        # (RemovePod: same namespace, selector matches, node included); only pods with a 1
        self.moves: list[dict[str, tuple[int, ...]]] = []
        for node in nodes:
            labels = node.info.labels
            if any(k not in labels for k in keys):  # nodeLabelsMatchSpreadConstraints
                self.domains.append(None)
                self.moves.append({})
                continue
            row = tuple((labels[c.topology_key], _included(pod, node.info, c)) for c in self.constraints)
            self.domains.append(row)
            moves: dict[str, tuple[int, ...]] = {}
            for p in node.pods:
                if p.namespace != ns or p.terminating:  # terminating pods never count (#87621)
                    continue
                flags = tuple(
                    1 if included and c.matches(p.labels) else 0
                    for c, (_, included) in zip(self.constraints, row, strict=True)
                )
                if any(flags):
                    moves[p.key] = flags
            self.moves.append(moves)
            for c, (constraint, (value, included)) in enumerate(zip(self.constraints, row, strict=True)):
                if included:  # countPodsMatchSelector counts nothing for an empty selector
                    number = sum(f[c] for f in moves.values()) if constraint.counts else 0
                    counts[c][value] = counts[c].get(value, 0) + number
        self.counts = counts
        self._zeros = (0,) * width
        # the two smallest domains per constraint: the global minimum without a given domain
        self.smallest = [sorted(d.items(), key=lambda kv: kv[1])[:2] for d in counts]
        self.self_match = [1 if c.matches(pod.labels) else 0 for c in self.constraints]
        self._required: dict[int, tuple[int, ...] | None] = {}

    def _other_min(self, c: int, value: str) -> float:
        constraint = self.constraints[c]
        if len(self.counts[c]) < constraint.min_domains:
            return 0
        for domain, number in self.smallest[c]:
            if domain != value:
                return number
        return math.inf

    def required(self, i: int, node: NodeState) -> tuple[int, ...] | None:
        """Per constraint, how many matching victims node i must lose for the preemptor to
        pass the filter there (<= 0: none); None when the node lacks a topology key."""
        if i in self._required:
            return self._required[i]
        row = self.domains[i]
        if row is None:
            self._required[i] = None
            return None
        nominated = [
            p
            for p in self.state.nominated.get(node.name, ())
            if p.priority >= self.priority and p.key != self.pod.key and p.namespace == self.pod.namespace
        ]
        out = []
        for c, (constraint, (value, included)) in enumerate(zip(self.constraints, row, strict=True)):
            number = self.counts[c].get(value, 0)
            if included:
                number += sum(1 for p in nominated if constraint.matches(p.labels))
            other = self._other_min(c, value)
            if math.isinf(other):
                out.append(-1)  # the only domain: it is always the minimum
            else:
                out.append(int(number + self.self_match[c] - other - constraint.max_skew))
        self._required[i] = result = tuple(out)
        return result

    def flags(self, i: int, pods: tuple[PodInfo, ...]) -> list[tuple[int, ...]]:
        """Per pod, per constraint: 1 if removing it lowers the node's domain count (RemovePod)."""
        moves, zeros = self.moves[i], self._zeros
        return [moves.get(p.key, zeros) for p in pods]

    def _removed(self, i: int, pods: Iterable[PodInfo]) -> list[int]:
        removed = [0] * len(self.constraints)
        moves = self.moves[i]
        for p in pods:
            flags = moves.get(p.key)
            if flags is not None:
                removed = [r + f for r, f in zip(removed, flags, strict=True)]
        return removed

    def fits_now(self, i: int, node: NodeState) -> bool:
        required = self.required(i, node)
        return required is not None and max(required) <= 0

    def can_help(self, i: int, node: NodeState, ranked: Ranked) -> bool:
        """Removing every possible victim satisfies every constraint."""
        required = self.required(i, node)
        if required is None:
            return False
        if max(required) <= 0:
            return True
        removable = self._removed(i, ranked.pods[ranked.below(self.priority) :]) if self.moves[i] else None
        if removable is None:
            return False
        return all(r <= have for r, have in zip(required, removable, strict=True))

    def holds(self, name: str, victims: tuple[PodInfo, ...]) -> bool:
        """Does removing `victims` from node `name` satisfy every constraint there?"""
        i = self.index[name]
        required = self.required(i, self.nodes[i])
        if required is None:
            return False
        removed = self._removed(i, victims)
        return all(r <= have for r, have in zip(required, removed, strict=True))

    def why_not(self, i: int) -> str:
        return NODE_LABEL_NOT_MATCH if self.domains[i] is None else CONSTRAINTS_NOT_MATCH

    def augment(self, i: int, node: NodeState, ranked: Ranked, width: int) -> tuple[Ranked, Need, list[int]]:
        """`ranked` with one virtual dimension per constraint after the state's `width`
        dimensions, the need entries naming them and their slack (minus the removals required)."""
        required = self.required(i, node)
        assert required is not None
        flags = self.flags(i, ranked.pods)
        vectors = tuple(v + f for v, f in zip(ranked.vectors, flags, strict=True))
        running = [0] * len(self.constraints)
        cum = []
        for base, f in zip(ranked.cum, [(0,) * len(running), *flags], strict=True):
            running = [r + x for r, x in zip(running, f, strict=True)]
            cum.append(base + tuple(running))
        largest = tuple(max(col, default=0) for col in zip(*flags, strict=True)) if flags else ()
        extended = Ranked(
            pods=ranked.pods,
            vectors=vectors,
            neg_priority=ranked.neg_priority,
            cum=tuple(cum),
            pdb_positions=ranked.pdb_positions,
            pdb_indices=ranked.pdb_indices,
            largest=ranked.largest + (largest or (0,) * len(running)),
            priority_tail=ranked.priority_tail,
        )
        extra = tuple((width + c, 1) for c in range(len(self.constraints)))
        return extended, extra, [-r for r in required]


def spread_plan(
    state: ClusterState, pod: PodInfo, nodes: list[NodeState], priority: int
) -> SpreadPlan | None:
    """The plan for a pod with hard constraints; None (nothing to pay) for every other pod."""
    return SpreadPlan(state, pod, nodes, priority) if pod.spread else None
