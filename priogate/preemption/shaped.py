"""Victims on one node for a single pod, shaped by the optional policies (policy.py).

kube-scheduler's SelectVictimsOnNode (pkg/scheduler/framework/plugins/defaultpreemption/
default_preemption.go) removes every lower-priority pod, then puts them back most important
first, PDB-violating ones before the others, keeping each one whose return still leaves room.
The same loop runs here over "items" instead of pods, in an order the policies set:

- victim classes (YuniKorn's simple preemptor): regular pods are taken first, owner/driver
  pods (named in another pod's ownerReferences) next, opted-out pods (soft mode) last, so the
  reprieve puts back opted-out pods first, then owners, then regular pods; within a class
  "priority wise, age wise and finally resource wise", as yunikorn-core's SortAllocations
  (pkg/scheduler/objects/sorters.go) orders victims: the lower priority, then the younger
  (later start, kube-scheduler's MoreImportantPod reads the start time, as here), then the
  smaller request (relative to the preemptor's) is taken first; the pod's name last;
- QoS order (the pod-preemption design): among equal priorities a Guaranteed pod is more
  important than a Burstable one, which is more important than a BestEffort one;
- gang-aware victims: a member of a running PodGroup is part of one item, its group, which
  comes back whole, or loses only surplus members (the group keeps minMember placed), or goes
  whole, members on other nodes included (as units.py / reprieve.py do for gangs). A DaemonSet
  preemptor never takes a group whole when that reaches beyond its node;
- PDB mode strict: no victim whose eviction exceeds a PodDisruptionBudget's allowance.

A node where that leaves no way to fit the preemptor is not a candidate; `Failure` says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from priogate.preemption.fit import Need
from priogate.preemption.nodes import Candidate
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.qos import QOS_RANK
from priogate.preemption.records import PodInfo
from priogate.preemption.state import ClusterState, importance_key, occupies
from priogate.preemption.units import group_members
from priogate.preemption.victims import NodeVictims, node_victims

# Why a candidate node fails under the policies (Failure.kind).
PDB, GANG, ROOM, LIMIT, DEVIATION = "pdb", "gang", "room", "limit", "deviation"
FAILURE_TEXT = {
    PDB: "only by violating a PodDisruptionBudget (--pdb-mode strict)",
    GANG: "only by breaking a PodGroup below minMember or, for a DaemonSet pod, taking one "
    "beyond its node (--gang-aware-victims)",
    ROOM: "not enough room once the policies' protected pods stay",
    LIMIT: "only with more victims than --max-victims",
    DEVIATION: "no single victim within --single-victim-deviation",
}


@dataclass(frozen=True, slots=True)
class Failure:
    node: str
    kind: str


@dataclass(frozen=True, slots=True)
class Item:
    """What the reprieve puts back or takes as one: a pod, or a PodGroup's placed members."""

    pods: tuple[PodInfo, ...]  # taken whole, these are the victims (a group's members anywhere)
    here: tuple[PodInfo, ...]  # those on the node evaluated, most important first
    surplus: int  # members that may go while the group keeps minMember (0 for a pod)
    whole: bool  # may be taken whole
    order: tuple  # smaller: more important, put back earlier


@dataclass
class Shaping:
    """One decision's policy context, shared by the nodes it evaluates."""

    state: ClusterState
    preemptor: PodInfo
    need: Need
    policy: PreemptionPolicy
    include_opted_out: bool
    groups: dict[str, tuple[tuple[PodInfo, ...], int] | None]  # group -> (placed members, surplus)

    def is_owner(self, pod: PodInfo) -> bool:
        return self.state.owner_refs.get(pod.key, 0) > 0

    def take_rank(self, pod: PodInfo) -> int:
        """Victim class, taken first = 0: regular, owner/driver (victim classes), opted out."""
        if pod.opted_out:
            return 2
        return 1 if self.policy.victim_classes and self.is_owner(pod) else 0

    def size(self, pod: PodInfo) -> float:
        """Victim classes only: the pod's requests relative to the preemptor's, summed over
        what it asks for; 0 for all otherwise."""
        if not self.policy.victim_classes:
            return 0.0
        vec = self.state.vectors[pod.key]
        return sum(vec[d] / amount for d, amount in self.need if amount > 0)

    def qos(self, pod: PodInfo) -> int:
        """Higher = more important (Guaranteed), 0 for all when QoS order is off."""
        return QOS_RANK[pod.qos] if self.policy.qos_order else 0

    def blocked_by_pdb(self, pod: PodInfo) -> bool:
        """Strict mode: a PDB covering the pod allows no disruption at all."""
        pdbs = self.state.pdbs
        return self.policy.pdb_mode == "strict" and any(
            pdbs[i].disruptions_allowed <= 0 for i in self.state.pdb_matches.get(pod.key, ())
        )

    def group(self, key: str) -> tuple[tuple[PodInfo, ...], int] | None:
        """A running PodGroup's placed members and surplus; None when it is not a unit the
        gang path could take (a member protected, opted out in this variant, or not below
        the preemptor: units.py's rule)."""
        if key not in self.groups:
            found: tuple[tuple[PodInfo, ...], int] | None = None
            state = self.state
            members = [
                p
                for p in (state.pods[k] for k in group_members(state).get(key, ()))
                if occupies(p, state.nodes) and not p.terminating
            ]
            if all(
                not p.protected
                and (self.include_opted_out or not p.opted_out)
                and p.priority < self.preemptor.priority
                for p in members
            ):
                ordered = tuple(sorted(members, key=importance_key))
                found = (ordered, len(members) - state.groups[key].min_member)
            self.groups[key] = found
        return self.groups[key]

    def items(self, candidate: Candidate, held: set[str] | None = None) -> list[Item]:
        """The node's possible victims under the policies, as items; `held` collects why
        some stay (PDB, GANG)."""
        node = candidate.node.name
        items: list[Item] = []
        seen: set[str] = set()
        held = set() if held is None else held
        for pod in candidate.ranked.pods[candidate.start :]:
            if not (self.policy.gang_aware_victims and pod.group in self.state.groups):
                if self.blocked_by_pdb(pod):
                    held.add(PDB)
                else:
                    order = (
                        self.take_rank(pod),
                        -pod.priority,
                        1,
                        -self.qos(pod),
                        pod.start_time,
                        -self.size(pod),
                        pod.key,
                    )
                    items.append(Item((pod,), (pod,), 0, True, order))
                continue
            if pod.group in seen:
                continue
            seen.add(pod.group)
            found = self.group(pod.group)
            if found is None:
                held.add(GANG)
                continue
            members, surplus = found
            blocked = {p.key for p in members if self.blocked_by_pdb(p)}
            here = tuple(p for p in members if p.node_name == node and p.key not in blocked)
            whole = not blocked and not (
                self.preemptor.daemonset and any(p.node_name != node for p in members)
            )
            if blocked:
                held.add(PDB)
            if not whole:
                held.add(GANG)
            if not here or (not whole and surplus <= 0):
                continue
            order = (
                max(self.take_rank(p) for p in members),
                -max(p.priority for p in members),
                0,  # a group before a pod of the same priority (units.py's rank)
                -max(self.qos(p) for p in members),
                min(p.start_time for p in members),
                -sum(self.size(p) for p in members),
                pod.group,
            )
            items.append(Item(members, here, max(surplus, 0), whole, order))
        return items


def _vector(state: ClusterState, pods: Sequence[PodInfo], dims: Sequence[int]) -> list[int]:
    total = [0] * len(dims)
    for pod in pods:
        vec = state.vectors[pod.key]
        for k, d in enumerate(dims):
            total[k] += vec[d]
    return total


def _fits(vec: Sequence[int], room: Sequence[int]) -> bool:
    return all(v <= r for v, r in zip(vec, room, strict=True))


def _shift(room: list[int], vec: Sequence[int], sign: int) -> None:
    for k, v in enumerate(vec):
        room[k] += sign * v


def _violating(shaping: Shaping, items: Sequence[Item]) -> set[int]:
    """Positions of items whose eviction would exceed a PDB's allowance, walking them in
    importance order from each PDB's disruptionsAllowed (filterPodsWithPDBViolation)."""
    state = shaping.state
    allowed: dict[int, int] = {}
    bad: set[int] = set()
    ranked = sorted(range(len(items)), key=lambda i: items[i].order[1:])  # importance order
    for position in ranked:
        for pod in items[position].pods:
            for i in state.pdb_matches.get(pod.key, ()):
                allowed[i] = allowed.get(i, state.pdbs[i].disruptions_allowed) - 1
                if allowed[i] < 0:
                    bad.add(position)
    return bad


def exceeds_pdbs(state: ClusterState, victims: Sequence[PodInfo]) -> bool:
    """Would evicting all of `victims` exceed some PDB's allowance?"""
    used: dict[int, int] = {}
    for pod in victims:
        for i in state.pdb_matches.get(pod.key, ()):
            used[i] = used.get(i, 0) + 1
            if used[i] > state.pdbs[i].disruptions_allowed:
                return True
    return False


def evaluate(shaping: Shaping, candidate: Candidate) -> NodeVictims | Failure:
    """The reprieve loop over the node's items (see the module docstring)."""
    state, node = shaping.state, candidate.node.name
    dims = [d for d, _ in shaping.need]
    held: set[str] = set()
    items = shaping.items(candidate, held)
    room = list(candidate.slack)
    for item in items:
        _shift(room, _vector(state, item.here, dims), +1)
    if min(room, default=0) < 0:
        return Failure(node, PDB if PDB in held else GANG if GANG in held else ROOM)
    strict = shaping.policy.pdb_mode == "strict"
    violating = set() if strict else _violating(shaping, items)
    # Reprieve order: the class taken last comes back first, then PDB-violating items, then
    # by importance.
    order = sorted(
        range(len(items)), key=lambda i: (-items[i].order[0], i not in violating, items[i].order[1:])
    )
    victims: list[PodInfo] = []
    violations = 0
    for position in order:
        item = items[position]
        vec = _vector(state, item.here, dims)
        if _fits(vec, room):
            _shift(room, vec, -1)
            continue
        if item.surplus > 0:
            back, lost = [], []
            for pod in item.here:
                one = _vector(state, (pod,), dims)
                if _fits(one, room):
                    _shift(room, one, -1)
                    back.append(pod)
                else:
                    lost.append(pod)
            if len(lost) <= item.surplus:
                victims.extend(lost)
                violations += len(lost) if position in violating else 0
                continue
            _shift(room, _vector(state, back, dims), +1)
        if not item.whole:
            return Failure(node, GANG)
        victims.extend(item.pods)
        violations += len(item.pods) if position in violating else 0
    if strict and exceeds_pdbs(state, victims):
        return Failure(node, PDB)
    chosen = tuple(sorted(victims, key=importance_key))
    return node_victims(
        node,
        chosen,
        violations,
        sum(1 for p in chosen if p.opted_out),
        sum(1 for p in chosen if shaping.is_owner(p)) if shaping.policy.victim_classes else 0,
    )
