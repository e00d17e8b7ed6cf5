"""The cluster as preemption sees it, with per-node aggregates computed once per snapshot.

Every node keeps its requested total and its possible victims sorted by importance with
prefix sums of their requests, so "how much would removing every pod below priority P free"
is one bisect and one subtraction, not a walk over the node's pods. Applying a decision
returns a new state in which only the touched nodes are rebuilt.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from priogate.podgroup import TERMINAL_POD_PHASES, PodPhase
from priogate.preemption.fit import Vector, make_dims, to_vector
from priogate.preemption.records import NodeInfo, PDBInfo, PodGroupInfo, PodInfo
from priogate.preemption.snapshot import Snapshot


def importance_key(pod: PodInfo) -> tuple[int, float, str]:
    """Sorts most important first: higher priority, then the earlier start (kube-scheduler's
    MoreImportantPod; no start time counts as "now"), then the name, for determinism."""
    return (-pod.priority, pod.start_time, pod.key)


@dataclass(frozen=True, slots=True)
class Ranked:
    """Pods sorted most important first, with bisectable priorities and request prefix sums."""

    pods: tuple[PodInfo, ...]
    vectors: tuple[Vector, ...]
    neg_priority: tuple[int, ...]  # ascending, for bisect
    cum: tuple[Vector, ...]  # cum[i] is the summed requests of pods[:i]
    pdb_positions: tuple[int, ...]  # positions of pods some PDB counts
    pdb_indices: tuple[tuple[int, ...], ...]  # ... and which PDBs
    largest: Vector  # per dimension, the largest single request
    priority_tail: tuple[int, ...]  # priority_tail[i]: summed priorities of pods[i:]

    @classmethod
    def of(
        cls,
        pods: Iterable[PodInfo],
        vectors: Mapping[str, Vector],
        width: int,
        pdb_matches: Mapping[str, tuple[int, ...]],
    ) -> Ranked:
        ordered = tuple(sorted(pods, key=importance_key))
        vecs = tuple(vectors[p.key] for p in ordered)
        running = [0] * width
        largest = [0] * width
        cum = [tuple(running)]
        for vec in vecs:
            for d in range(width):
                running[d] += vec[d]
                if vec[d] > largest[d]:
                    largest[d] = vec[d]
            cum.append(tuple(running))
        covered = [(i, pdb_matches[p.key]) for i, p in enumerate(ordered) if pdb_matches.get(p.key)]
        return cls(
            ordered,
            vecs,
            tuple(-p.priority for p in ordered),
            tuple(cum),
            tuple(i for i, _ in covered),
            tuple(m for _, m in covered),
            tuple(largest),
            tuple(_tail_sums([p.priority for p in ordered])),
        )

    def below(self, priority: int) -> int:
        """Index of the first pod with priority strictly below `priority`."""
        return bisect_right(self.neg_priority, -priority)

    def __len__(self) -> int:
        return len(self.pods)


def _tail_sums(values: list[int]) -> list[int]:
    tails = [0] * (len(values) + 1)
    for i in range(len(values) - 1, -1, -1):
        tails[i] = tails[i + 1] + values[i]
    return tails


@dataclass(frozen=True, slots=True)
class NodeState:
    info: NodeInfo
    alloc: Vector
    requested: Vector  # every pod bound here that is not finished, terminating ones included
    free: Vector  # alloc - requested (negative where the node is overcommitted)
    pods: tuple[PodInfo, ...]
    terminating: Ranked  # lower-priority ones are leaving anyway: never victims, yet free space
    victims_strict: Ranked  # possible victims without the opted-out pods
    victims_all: Ranked  # possible victims, opted-out pods included (soft mode's last resort)
    has_opted_out: bool

    @property
    def name(self) -> str:
        return self.info.name


class ScreenRow(NamedTuple):
    """What per-node loops of a decision read of a node, flattened: they unpack one tuple
    instead of following attributes."""

    name: str
    node: NodeState
    restricted: bool  # has taints or is unschedulable: the static filters must run
    free: Vector
    leaving: Ranked | None  # terminating pods, if any
    strict: Ranked
    everything: Ranked


def screen_row(name: str, node: NodeState) -> ScreenRow:
    return ScreenRow(
        name,
        node,
        bool(node.info.taints or node.info.unschedulable),
        node.free,
        node.terminating if node.terminating.pods else None,
        node.victims_strict,
        node.victims_all,
    )


def screen_rows(nodes: Mapping[str, NodeState]) -> tuple[ScreenRow, ...]:
    return tuple(screen_row(name, node) for name, node in sorted(nodes.items()))


@dataclass(frozen=True, slots=True)
class ClusterState:
    dims: tuple[str, ...]
    nodes: Mapping[str, NodeState]
    node_names: tuple[str, ...]  # sorted, the deterministic visiting order
    rows: tuple[ScreenRow, ...]  # per node in that order
    pods: Mapping[str, PodInfo]
    vectors: Mapping[str, Vector]
    groups: Mapping[str, PodGroupInfo]
    pdbs: tuple[PDBInfo, ...]
    pdb_matches: Mapping[str, tuple[int, ...]]  # bound pod -> PDBs that count it
    nominated: Mapping[str, tuple[PodInfo, ...]]  # node -> pending pods nominated to it
    # pod key -> how many pods of `pods` name it in their ownerReferences (owner/driver pods)
    owner_refs: Mapping[str, int] = field(default_factory=dict)
    # Derived indexes computed on first use (gang victim units); a new state starts empty.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def bound_pods(self) -> Iterable[PodInfo]:
        for node in self.nodes.values():
            yield from node.pods


def occupies(pod: PodInfo, nodes: Mapping[str, object]) -> bool:
    """Bound to a known node and not finished: it uses that node's resources."""
    return bool(pod.node_name) and pod.node_name in nodes and pod.phase not in TERMINAL_POD_PHASES


def is_pending(pod: PodInfo) -> bool:
    return not pod.node_name and pod.phase not in TERMINAL_POD_PHASES and not pod.terminating


def build_state(snapshot: Snapshot) -> ClusterState:
    dims = make_dims(snapshot.nodes, snapshot.pods)
    vectors = {p.key: to_vector(p.requests, dims, pod=True) for p in snapshot.pods}
    pods = {p.key: p for p in snapshot.pods}
    infos = {n.name: n for n in snapshot.nodes}
    pdb_matches = {p.key: pdb_indices(p, snapshot.pdbs) for p in snapshot.pods if occupies(p, infos)}
    by_node: dict[str, list[PodInfo]] = {name: [] for name in infos}
    for pod in snapshot.pods:
        if occupies(pod, infos):
            by_node[pod.node_name].append(pod)
    nodes = {name: node_state(infos[name], by_node[name], vectors, pdb_matches, dims) for name in infos}
    return ClusterState(
        dims=dims,
        nodes=nodes,
        node_names=tuple(sorted(nodes)),
        rows=screen_rows(nodes),
        pods=pods,
        vectors=vectors,
        groups={g.key: g for g in snapshot.groups},
        pdbs=snapshot.pdbs,
        pdb_matches=pdb_matches,
        nominated=_nominations(pods.values(), nodes),
        owner_refs=owner_counts(pods.values()),
    )


def owner_counts(pods: Iterable[PodInfo]) -> dict[str, int]:
    """Pod key -> the number of `pods` naming it as an owner (YuniKorn's driver/owner pods)."""
    counts: dict[str, int] = {}
    for pod in pods:
        for owner in pod.owner_pods:
            counts[owner] = counts.get(owner, 0) + 1
    return counts


def pdb_indices(
    pod: PodInfo, pdbs: tuple[PDBInfo, ...], candidates: Iterable[int] | None = None
) -> tuple[int, ...]:
    """PDBs that would count this pod's disruption (filterPodsWithPDBViolation's matching).
    `candidates`: the ascending indices worth checking (those of the pod's namespace), if known."""
    if not pod.labels:
        return ()
    return tuple(
        i
        for i, pdb in (enumerate(pdbs) if candidates is None else ((i, pdbs[i]) for i in candidates))
        if pdb.namespace == pod.namespace
        and pdb.selector is not None
        and not pdb.selector.empty
        and pod.name not in pdb.disrupted_pods
        and pdb.selector.matches(pod.labels)
    )


def node_state(
    info: NodeInfo,
    pods: list[PodInfo],
    vectors: Mapping[str, Vector],
    pdb_matches: Mapping[str, tuple[int, ...]],
    dims: tuple[str, ...],
) -> NodeState:
    width = len(dims)
    requested = [0] * width
    for pod in pods:
        for d, amount in enumerate(vectors[pod.key]):
            requested[d] += amount
    possible = [p for p in pods if not p.terminating and not p.protected]
    strict = [p for p in possible if not p.opted_out]
    victims_strict = Ranked.of(strict, vectors, width, pdb_matches)
    has_opted_out = len(strict) != len(possible)
    alloc = to_vector(info.allocatable, dims, pod=False)
    return NodeState(
        info=info,
        alloc=alloc,
        requested=tuple(requested),
        free=tuple(a - r for a, r in zip(alloc, requested, strict=True)),
        pods=tuple(pods),
        terminating=Ranked.of((p for p in pods if p.terminating), vectors, width, {}),
        victims_strict=victims_strict,
        victims_all=Ranked.of(possible, vectors, width, pdb_matches) if has_opted_out else victims_strict,
        has_opted_out=has_opted_out,
    )


def _nominations(pods: Iterable[PodInfo], nodes: Mapping[str, NodeState]) -> dict[str, tuple[PodInfo, ...]]:
    nominated: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if is_pending(pod) and pod.nominated_node in nodes:
            nominated.setdefault(pod.nominated_node, []).append(pod)
    return {node: tuple(sorted(ps, key=importance_key)) for node, ps in nominated.items()}


def apply_decision(
    state: ClusterState,
    victims: Iterable[str],
    placements: Mapping[str, str],
    clear_below: int | None = None,
) -> ClusterState:
    """The state after a decision: victims gone, preemptors bound to their nodes and pods
    nominated to those nodes with priority below `clear_below` no longer nominated there
    (they may not fit any more and should look elsewhere, as kube-scheduler does)."""
    pods = dict(state.pods)
    pdb_matches = dict(state.pdb_matches)
    owner_refs: dict[str, int] | None = None  # copied on the first victim that names an owner
    touched: set[str] = set()
    for key in victims:
        victim = pods.pop(key)
        if victim.owner_pods:
            owner_refs = dict(state.owner_refs) if owner_refs is None else owner_refs
            for owner in victim.owner_pods:
                owner_refs[owner] -= 1
                if not owner_refs[owner]:
                    del owner_refs[owner]
        pdb_matches.pop(key, None)
        touched.add(victim.node_name)
    for key, node in placements.items():
        pods[key] = dataclasses.replace(pods[key], node_name=node, nominated_node="", phase=PodPhase.RUNNING)
        pdb_matches[key] = pdb_indices(pods[key], state.pdbs)
        touched.add(node)
    if clear_below is not None:
        for node in set(placements.values()):
            for pod in state.nominated.get(node, ()):
                if pod.priority < clear_below and pod.key in pods and not pods[pod.key].node_name:
                    pods[pod.key] = dataclasses.replace(pod, nominated_node="")
    memo: dict[str, Any] = {}
    anti = state.memo.get("anti_affinity")  # gang_fit.anti_pods: carried, not found again
    if anti is not None:
        memo["anti_affinity"] = {key: pods[key] for key in anti if key in pods}
    nodes = dict(state.nodes)
    for name in touched:
        staying = [pods[p.key] for p in nodes[name].pods if p.key in pods]
        arriving = [pods[key] for key, node in placements.items() if node == name]
        nodes[name] = node_state(nodes[name].info, staying + arriving, state.vectors, pdb_matches, state.dims)
    return dataclasses.replace(
        state,
        nodes=nodes,
        rows=screen_rows(nodes),
        pods=pods,
        pdb_matches=pdb_matches,
        nominated=_nominations(pods.values(), nodes),
        owner_refs=state.owner_refs if owner_refs is None else owner_refs,
        memo=memo,
    )
