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

import heapq
import math
from collections.abc import Iterable
from itertools import compress, repeat
from operator import is_, itemgetter, or_

from priogate.preemption.fit import Need
from priogate.preemption.labels import label_index
from priogate.preemption.records import NodeInfo, PodInfo
from priogate.preemption.selectors import BLOCKING_EFFECTS, node_affinity_matches, tolerated
from priogate.preemption.spread import SpreadConstraint
from priogate.preemption.state import ClusterState, NodeState, Ranked
from priogate.preemption.table import ScreenTable

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
    """One preemptor's hard constraints against one cluster state, per node of the table.

    Only the nodes holding pods its selectors match, and the nodes a decision asks about,
    are looked at one by one: the matching pods come from the label index, and the domain
    of every node is one label lookup per constraint, in bulk."""

    def __init__(self, state: ClusterState, pod: PodInfo, table: ScreenTable, priority: int) -> None:
        self.pod = pod
        self.constraints = constraints = pod.spread
        self.state = state
        self.priority = priority
        self.nodes, self.ranked, self.index = table.nodes, table.ranked, table.index
        infos = [node.info for node in table.nodes]
        # per constraint, per node: its domain, the value of the topology key (None: missing)
        self.values = [[info.labels.get(c.topology_key) for info in infos] for c in constraints]
        # nodes lacking a topology key (nodeLabelsMatchSpreadConstraints): they never count
        count = len(infos)
        self.unlabelled = frozenset(
            i for column in self.values for i in compress(range(count), map(is_, column, repeat(None)))
        )
        # per constraint: labelled nodes its inclusion policies leave out
        self.excluded = [self._excluded(c, infos) for c in constraints]
        counts: list[dict[str, int]] = []
        for c, column in enumerate(self.values):
            if self.unlabelled or self.excluded[c]:
                skip = self.unlabelled | self.excluded[c]
                counts.append(dict.fromkeys((v for i, v in enumerate(column) if i not in skip), 0))
            else:
                counts.append(dict.fromkeys(column, 0))
        # per node with matching pods: pod key -> per constraint 1 if removing the pod lowers
        # the domain's count (RemovePod: same namespace, selector matches, node included);
        # only pods with a 1. Terminating pods never count (#87621).
        self.moves: dict[int, dict[str, tuple[int, ...]]] = {}
        namespace = label_index(state).namespace(pod.namespace)
        matching: dict[str, PodInfo] = {}
        for constraint in constraints:
            if constraint.selector is not None:
                for p in namespace.candidates(constraint.selector):
                    if not p.terminating and constraint.matches(p.labels):
                        matching[p.key] = p
        for p in matching.values():
            i = self.index[p.node_name]
            if i in self.unlabelled:
                continue
            flags = tuple(
                1 if i not in excluded and c.matches(p.labels) else 0
                for c, excluded in zip(constraints, self.excluded, strict=True)
            )
            if any(flags):
                self.moves.setdefault(i, {})[p.key] = flags
                for c, (constraint, flag) in enumerate(zip(constraints, flags, strict=True)):
                    if flag and constraint.counts:  # countPodsMatchSelector counts none for {}
                        counts[c][self.values[c][i]] += 1
        self.counts = counts
        self._zeros = (0,) * len(constraints)
        # the two smallest domains per constraint: the global minimum without a given domain
        self.smallest = [heapq.nsmallest(2, d.items(), key=itemgetter(1)) for d in counts]
        self.self_match = [1 if c.matches(pod.labels) else 0 for c in constraints]
        self._required: dict[int, tuple[int, ...] | None] = {}

    def _excluded(self, constraint: SpreadConstraint, infos: list[NodeInfo]) -> frozenset[int]:
        """Labelled nodes that matchNodeInclusionPolicies leaves out, looking only where a
        policy can leave any out."""
        pod = self.pod
        affinity = constraint.honor_affinity and (bool(pod.node_selector) or pod.affinity is not None)
        if not affinity and not constraint.honor_taints:
            return frozenset()
        return frozenset(
            i
            for i, info in enumerate(infos)
            if (affinity or info.taints) and i not in self.unlabelled and not _included(pod, info, constraint)
        )

    def _other_min(self, c: int, value: str) -> float:
        constraint = self.constraints[c]
        if len(self.counts[c]) < constraint.min_domains:
            return 0
        for domain, number in self.smallest[c]:
            if domain != value:
                return number
        return math.inf

    def _excess(self, c: int, value: str, number: int) -> int:
        """How far `number` matching pods in domain `value` exceed constraint c's skew."""
        other = self._other_min(c, value)
        if math.isinf(other):
            return -1  # the only domain: it is always the minimum
        return int(number + self.self_match[c] - other - self.constraints[c].max_skew)

    def required(self, i: int, node: NodeState) -> tuple[int, ...] | None:
        """Per constraint, how many matching victims node i must lose for the preemptor to
        pass the filter there (<= 0: none); None when the node lacks a topology key."""
        if i in self._required:
            return self._required[i]
        if i in self.unlabelled:
            self._required[i] = None
            return None
        nominated = [
            p
            for p in self.state.nominated.get(node.name, ())
            if p.priority >= self.priority and p.key != self.pod.key and p.namespace == self.pod.namespace
        ]
        out = []
        for c, constraint in enumerate(self.constraints):
            value = self.values[c][i]
            assert value is not None
            number = self.counts[c].get(value, 0)
            if nominated and i not in self.excluded[c]:
                number += sum(1 for p in nominated if constraint.matches(p.labels))
            out.append(self._excess(c, value, number))
        self._required[i] = result = tuple(out)
        return result

    def helpful(self, candidates: list[int]) -> list[int]:
        """The candidates where removing every possible victim satisfies every constraint
        (can_help), in order. A node without matching pods or pods nominated to it can lose
        nothing that counts: it helps exactly when its domains are within the skew as they
        are, and only domains holding matching pods can exceed it (the smallest other domain
        is >= 0 and maxSkew >= 1 >= the preemptor's own match), so those nodes are sorted
        out by domain, in bulk; the others are asked one by one."""
        rejected = [False] * len(self.nodes)  # per node, built column by column
        for c, column in enumerate(self.values):
            crowded = {column[i] for i in self.moves}
            over = {v for v in crowded if v is not None and self._excess(c, v, self.counts[c].get(v, 0)) > 0}
            if over:
                rejected = list(map(or_, rejected, map(over.__contains__, column)))
        for i in self.unlabelled:
            rejected[i] = True
        one_by_one = set(self.moves) | {self.index[n] for n in self.state.nominated if n in self.index}
        nodes, ranked = self.nodes, self.ranked
        return [
            i
            for i in candidates
            if (self.can_help(i, nodes[i], ranked[i]) if i in one_by_one else not rejected[i])
        ]

    def flags(self, i: int, pods: tuple[PodInfo, ...]) -> list[tuple[int, ...]]:
        """Per pod, per constraint: 1 if removing it lowers the node's domain count (RemovePod)."""
        moves, zeros = self.moves.get(i, {}), self._zeros
        return [moves.get(p.key, zeros) for p in pods]

    def _removed(self, i: int, pods: Iterable[PodInfo]) -> list[int]:
        removed = [0] * len(self.constraints)
        moves = self.moves.get(i, {})
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
        removable = self._removed(i, ranked.pods[ranked.below(self.priority) :]) if i in self.moves else None
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
        return NODE_LABEL_NOT_MATCH if i in self.unlabelled else CONSTRAINTS_NOT_MATCH

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


def spread_plan(state: ClusterState, pod: PodInfo, table: ScreenTable, priority: int) -> SpreadPlan | None:
    """The plan for a pod with hard constraints; None (nothing to pay) for every other pod."""
    return SpreadPlan(state, pod, table, priority) if pod.spread else None
