"""The preemption engine: every pending preemptor of a snapshot, in order, each decision
applied to the state before the next one is taken.

Order: priority (highest first), then creation time, then name. A pod whose PodGroup still
needs members to reach minMember is not a preemptor on its own: the group is, and preempts
for all its needed members at once. A pod that fits without preemption gets no decision.

`decide_for_group` is one PodGroup's decision on its own: what the controller applies.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from priogate.podgroup import FINISHED_PHASES, Phase, PodPhase
from priogate.preemption.gang import GangRequest, preempt_group
from priogate.preemption.outcome import Outcome, unresolved
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption.records import NEVER, PDBInfo, PodGroupInfo, PodInfo
from priogate.preemption.single import preempt_pod
from priogate.preemption.snapshot import Snapshot
from priogate.preemption.state import ClusterState, apply_decision, build_state, is_pending
from priogate.preemption.table import carry_tables, screen_table
from priogate.preemption.units import GROUP_PREFIX, group_members

PENDING_GROUP = (
    "PodGroup phase is Pending (not yet admitted to its queue); like Volcano's preempt action, "
    "preemption waits until it is Inqueue"
)
NOT_IN_SNAPSHOT = "PodGroup not in the snapshot"
NOTHING_TO_PLACE = "PodGroup finished, or no pending member is needed to reach minMember"


@dataclass(frozen=True)
class Preemptor:
    priority: int
    created: float
    key: str  # pod key, or "podgroup:" + group key
    pod: PodInfo | None = None
    gang: GangRequest | None = None

    @property
    def order(self) -> tuple[int, float, str]:
        return (-self.priority, self.created, self.key)


@dataclass(frozen=True)
class Result:
    outcomes: tuple[Outcome, ...]
    nodes: int
    pods: int
    seconds: float

    def to_json(self, *, explain: bool = False) -> dict[str, Any]:
        decisions, pending = [], []
        for outcome in self.outcomes:
            if outcome.status == "preempt":
                entry: dict[str, Any] = {
                    "preemptor": outcome.preemptor,
                    "nominatedNode": outcome.node,
                    "placements": dict(outcome.placements),
                    "victims": [v.key for v in outcome.victims],
                    "reason": outcome.reason,
                }
                decisions.append(entry)
            elif outcome.status == "unresolved":
                entry = {"preemptor": outcome.preemptor, "reason": outcome.reason}
                pending.append(entry)
            else:
                continue
            if explain:
                entry["nodes"] = dict(outcome.nodes or {})
        return {
            "decisions": decisions,
            "unresolved": pending,
            "stats": {"nodes": self.nodes, "pods": self.pods, "decisionSeconds": round(self.seconds, 6)},
        }


def preemptors(state: ClusterState) -> list[Preemptor]:
    """Pending pods and PodGroups that may need preemption, in decision order."""
    members: dict[str, list[PodInfo]] = {}
    for pod in state.pods.values():
        if pod.group in state.groups:
            members.setdefault(pod.group, []).append(pod)
    found: list[Preemptor] = []
    gang_members: set[str] = set()
    for key, group in state.groups.items():
        request = gang_request(group, members.get(key, []))
        if request is None:
            continue
        gang_members.update(p.key for p in request.pending)
        found.append(Preemptor(request.priority, group.created, GROUP_PREFIX + key, gang=request))
    for pod in state.pods.values():
        if is_pending(pod) and not pod.gated and pod.key not in gang_members:
            if pod.group in state.groups and state.groups[pod.group].phase in FINISHED_PHASES:
                continue
            found.append(Preemptor(pod.priority, pod.created, pod.key, pod=pod))
    return sorted(found, key=lambda p: p.order)


def gang_request(group: PodGroupInfo, members: list[PodInfo]) -> GangRequest | None:
    """The group as a preemptor when it has fewer than minMember members placed; None when it
    is finished or already complete (its other pending pods then preempt one by one)."""
    if group.phase in FINISHED_PHASES:
        return None
    placed = [p for p in members if p.node_name and not p.terminating and p.phase != PodPhase.FAILED]
    needed = group.min_member - len(placed)
    pending = sorted((p for p in members if is_pending(p) and not p.gated), key=lambda p: (p.created, p.key))
    if needed <= 0 or not pending:
        return None
    priority, note = gang_priority(group.priority, [p.priority for p in pending[:needed]])
    never = group.preemption_policy == NEVER or any(p.preemption_policy == NEVER for p in pending[:needed])
    return GangRequest(group, tuple(pending), needed, priority, never, note)


def gang_priority(class_value: int | None, member_priorities: Sequence[int]) -> tuple[int, str]:
    """The priority a gang preempts at, and why it is not its class's value: the lowest admitted
    priority of the members it would place, never above its PodGroup's class value. A pod's
    priority is what admission allowed it (its own class, under the quotas scoped to that
    class), while a PodGroup's class is only named: members created without the group's class
    must not borrow it, or a group naming a critical class would let priority-0 pods preempt.
    `class_value` None: the group names no (known) class."""
    if not member_priorities:
        return (class_value or 0), ""
    lowest = min(member_priorities)
    if class_value is None or lowest == class_value:
        return lowest, ""
    priority = min(lowest, class_value)
    return priority, (
        f"members' admitted priority {lowest} differs from the PodGroup's class value {class_value}: "
        f"ranked at {priority}"
    )


def run(
    state: ClusterState,
    *,
    policy: PreemptionPolicy = DEFAULT_POLICY,
    explain: bool = False,
    now: float | None = None,
) -> tuple[Outcome, ...]:
    """Every decision, in preemptor order. `now` (epoch seconds, the caller's clock) is needed
    only by --preemption-start-delay: the engine never reads the wall clock."""
    outcomes: list[Outcome] = []
    for preemptor in preemptors(state):
        # A pod decided earlier in this run may have been placed or preempted meanwhile.
        if preemptor.pod is not None:
            current = state.pods.get(preemptor.key)
            if current is None or not is_pending(current):
                continue
            outcome = preempt_pod(state, current, policy=policy, explain=explain, now=now)
        else:
            assert preemptor.gang is not None
            if preemptor.gang.group.phase == Phase.PENDING:
                outcomes.append(unresolved(preemptor.key, PENDING_GROUP))
                continue
            outcome = preempt_group(state, preemptor.gang, policy=policy, explain=explain)
        outcomes.append(outcome)
        if outcome.status == "preempt":
            victims = [v.key for v in outcome.victims]
            after = apply_decision(state, victims, outcome.placements, outcome.clear_below)
            if policy.pdb_mode == "strict":
                # The next decisions of this run must not spend the same allowance again
                # (the disruption controller updates the PDBs' status only later).
                after = dataclasses.replace(after, pdbs=spend_pdbs(state, outcome.victims))
            touched = {v.node_name for v in outcome.victims} | set(outcome.placements.values())
            carry_tables(state, after, touched)
            state = after
    return tuple(outcomes)


def spend_pdbs(state: ClusterState, victims: Iterable[PodInfo]) -> tuple[PDBInfo, ...]:
    """The state's PDBs with the victims' disruptions taken from their allowances."""
    spent: dict[int, int] = {}
    for victim in victims:
        for i in state.pdb_matches.get(victim.key, ()):
            spent[i] = spent.get(i, 0) + 1
    pdbs = list(state.pdbs)
    for i, count in spent.items():
        pdbs[i] = dataclasses.replace(pdbs[i], disruptions_allowed=pdbs[i].disruptions_allowed - count)
    return tuple(pdbs)


def run_timed(
    state: ClusterState,
    *,
    policy: PreemptionPolicy = DEFAULT_POLICY,
    explain: bool = False,
    now: float | None = None,
) -> Result:
    """Every decision for `state`, timed (the state's aggregates are built already)."""
    started = time.perf_counter()
    outcomes = run(state, policy=policy, explain=explain, now=now)
    seconds = time.perf_counter() - started
    return Result(outcomes, nodes=len(state.nodes), pods=len(state.pods), seconds=seconds)


def prepare(snapshot: Snapshot) -> ClusterState:
    """The state with its per-snapshot aggregates, including the screening table."""
    state = build_state(snapshot)
    screen_table(state, include_opted_out=False)
    return state


def simulate(
    snapshot: Snapshot,
    *,
    policy: PreemptionPolicy = DEFAULT_POLICY,
    explain: bool = False,
    now: float | None = None,
) -> Result:
    """Decide every preemption in `snapshot`; decision time excludes building the state."""
    return run_timed(prepare(snapshot), policy=policy, explain=explain, now=now)


def decide_for_group(
    snapshot: Snapshot, group_key: str, *, policy: PreemptionPolicy = DEFAULT_POLICY, explain: bool = False
) -> Outcome:
    """The gang preemption decision for one PodGroup ("namespace/name") of `snapshot`: the
    decision the controller records and applies.

    It is the step `run` takes for that group, on the snapshot as it is: no other preemptor
    is decided first. Unlike `run`, a group in phase Pending is decided too: the controller
    asks only for groups it found admitted (preemption_record.needs_preemption), on the
    PodGroup object it holds, which may be newer than the snapshot's copy.
    """
    return decide_group(prepare(snapshot), group_key, policy=policy, explain=explain)


def decide_group(
    state: ClusterState, group_key: str, *, policy: PreemptionPolicy = DEFAULT_POLICY, explain: bool = False
) -> Outcome:
    """`decide_for_group` on a state already prepared, e.g. LiveClusterState.current()."""
    key = GROUP_PREFIX + group_key
    group = state.groups.get(group_key)
    if group is None:
        return unresolved(key, NOT_IN_SNAPSHOT)
    # The members by index, not by a walk over every pod of the cluster (gang_request does
    # not depend on their order).
    members = [state.pods[k] for k in group_members(state).get(group_key, ())]
    request = gang_request(group, members)
    if request is None:
        return unresolved(key, NOTHING_TO_PLACE)
    return preempt_group(state, request, policy=policy, explain=explain)


NOT_A_POD = "pod not in the snapshot"
NOT_PENDING = "not pending: bound, finished, terminating or gated"
GANG_MEMBER = "member of a PodGroup still short of minMember: its gang preemption decides for it"
FINISHED_GROUP = "its PodGroup is finished"


def decide_pod(
    state: ClusterState,
    pod_key: str,
    *,
    policy: PreemptionPolicy = DEFAULT_POLICY,
    explain: bool = False,
    now: float | None = None,
) -> Outcome:
    """The single-pod preemption decision for one pending pod ("namespace/name") of a state
    already prepared (e.g. LiveClusterState.current()): the step `run` takes for that pod, on
    the state as it is (no other preemptor decided first). A pod `preemptors` would not list on
    its own (a member of a gang still short of minMember, a member of a finished group, a pod
    not pending) gets an unresolved outcome saying why."""
    pod = state.pods.get(pod_key)
    if pod is None:
        return unresolved(pod_key, NOT_A_POD)
    if not is_pending(pod) or pod.gated:
        return unresolved(pod_key, NOT_PENDING)
    group = state.groups.get(pod.group) if pod.group else None
    if group is not None:
        if group.phase in FINISHED_PHASES:
            return unresolved(pod_key, FINISHED_GROUP)
        members = [state.pods[k] for k in group_members(state).get(pod.group, ())]
        request = gang_request(group, members)
        if request is not None and any(p.key == pod_key for p in request.pending):
            return unresolved(pod_key, GANG_MEMBER)
    return preempt_pod(state, pod, policy=policy, explain=explain, now=now)
