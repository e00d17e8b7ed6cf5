"""Preemption for one pending pod, with kube-scheduler parity (DefaultPreemption).

Eligibility (preemptionPolicy Never; earlier victims still terminating on the nominated
node), then every node screened, victims chosen per node by the reprieve loop, and the node
picked by kube-scheduler's order. Opt-out "soft" mode retries with opted-out pods allowed
only when no node works without them (YuniKorn's "victimised last").

The optional policies (policy.py) that change victims hand the decision to strategies.py
after the same screening; with every policy at its default the code below is
kube-scheduler's, unchanged. The start delay is checked first, against the caller's `now`.
"""

from __future__ import annotations

import math

from priogate.preemption.fit import Need, need_of, static_failure
from priogate.preemption.nodes import Screening, choose_node, screen_nodes
from priogate.preemption.outcome import (
    PDB_STRICT_REASON,
    Outcome,
    describe_victims,
    fits,
    lost_because,
    summarize_failures,
    unresolved,
    with_note,
)
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.records import NEVER, PodInfo
from priogate.preemption.shaped import FAILURE_TEXT, PDB, Failure, Shaping
from priogate.preemption.state import ClusterState
from priogate.preemption.strategies import Choice, decide, summarize
from priogate.preemption.victims import NodeVictims, node_victims

NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."


def waiting_for_victims(state: ClusterState, pod: PodInfo, priority: int | None = None) -> bool:
    """The pod's nominated node still holds a lower-priority pod that the scheduler is
    terminating (PodEligibleToPreemptOthers). A nominated node the pod can never use does
    not count: the pod may then preempt elsewhere."""
    node = state.nodes.get(pod.nominated_node)
    if node is None or static_failure(pod, node.info):
        return False
    own = pod.priority if priority is None else priority
    return any(
        p.terminating and p.preempted_by_scheduler and p.priority < own and not p.protected for p in node.pods
    )


def shaped(policy: PreemptionPolicy) -> bool:
    """Does a policy change which victims a single pod takes?"""
    return (
        policy.gang_aware_victims
        or policy.victim_classes
        or policy.qos_order
        or policy.pdb_mode == "strict"
        or not policy.kube_scheduler_victims
    )


def active_policies(policy: PreemptionPolicy, *, opted_out: bool = False) -> str:
    """The policies that shaped a decision, for its reason."""
    names = []
    if policy.start_delay > 0:
        names.append(f"start delay {policy.start_delay:g}s met")
    if policy.gang_aware_victims:
        names.append("gang-aware victims")
    if policy.victim_classes:
        names.append("victim classes")
    if policy.qos_order:
        names.append("QoS order")
    if policy.pdb_mode == "strict":
        names.append("PDB mode strict")
    if not policy.kube_scheduler_victims:
        names.append(f"victim selection {','.join(policy.victim_selection)}")
    if opted_out:
        names.append("opt-out soft")
    return ", ".join(names)


def start_delay_wait(pod: PodInfo, policy: PreemptionPolicy, now: float | None) -> str:
    """Why the pod must wait for --preemption-start-delay (YuniKorn's reservation age), or ""."""
    delay = policy.start_delay
    if delay <= 0:
        return ""
    if now is None:
        raise ValueError("the preemption start delay needs the current time")
    if math.isinf(pod.unschedulable_since):
        return (
            f"waiting for --preemption-start-delay {delay:g}s: "
            "not marked unschedulable (PodScheduled=False) yet"
        )
    waited = now - pod.unschedulable_since
    if waited < delay:
        return f"waiting for --preemption-start-delay {delay:g}s: unschedulable for {max(waited, 0.0):.0f}s"
    return ""


def preempt_pod(
    state: ClusterState,
    pod: PodInfo,
    *,
    policy: PreemptionPolicy,
    explain: bool,
    now: float | None = None,
) -> Outcome:
    need = need_of(state.vectors[pod.key])
    screening = screen_nodes(state, pod, need, pod.priority, include_opted_out=False, want_failures=explain)
    if screening.fits_on:
        return fits(pod.key)
    if pod.preemption_policy == NEVER:
        return unresolved(pod.key, with_note(NOT_ELIGIBLE_NEVER, pod.priority_note))
    if pod.nominated_node and waiting_for_victims(state, pod):
        return unresolved(pod.key, with_note(NOT_ELIGIBLE_TERMINATING, pod.priority_note))
    wait = start_delay_wait(pod, policy, now)
    if wait:
        return unresolved(pod.key, with_note(wait, pod.priority_note))
    if shaped(policy):
        return _preempt_shaped(state, pod, need, screening, policy, explain)
    opted_out_first = False
    soft = policy.opt_out_mode == "soft" and any(node.has_opted_out for node in state.nodes.values())
    if not screening.bounds and soft:
        retry = screen_nodes(state, pod, need, pod.priority, include_opted_out=True, want_failures=explain)
        if retry.bounds:
            screening, opted_out_first = retry, True
    nodes_explained: dict[str, str] | None = dict(screening.failures) if explain else None
    if not screening.bounds:
        reason = f"preemption is not helpful: {summarize_failures(screening.failures, len(state.nodes))}"
        return unresolved(pod.key, with_note(reason, pod.priority_note), nodes_explained)
    best, evaluated = choose_node(state, screening, need, opted_out_first=opted_out_first, exhaustive=explain)
    assert best is not None
    if nodes_explained is not None:
        for name, result in evaluated.items():
            nodes_explained[name] = "chosen" if result is best else lost_because(result, best)
    how = f"best of {len(screening.bounds)} candidate node(s) by kube-scheduler's node order"
    return _preempting(pod, best, how, nodes_explained)


def _preempting(pod: PodInfo, best: NodeVictims, how: str, nodes: dict[str, str] | None) -> Outcome:
    """The decision to preempt `best.victims` for `pod` on `best.node`; `how` says why there."""
    reason = f"preempt on {best.node}: {describe_victims(best)}; {how}"
    return Outcome(
        preemptor=pod.key,
        status="preempt",
        reason=with_note(reason, pod.priority_note),
        node=best.node,
        placements={pod.key: best.node},
        victims=best.victims,
        nodes=nodes,
        clear_below=pod.priority,
    )


def _preempt_shaped(
    state: ClusterState,
    pod: PodInfo,
    need: Need,
    screening: Screening,
    policy: PreemptionPolicy,
    explain: bool,
) -> Outcome:
    """The strategies in the admin's order, without opted-out pods and then, in soft mode,
    with them (victimised last)."""
    variants: list[tuple[bool, Screening | None]] = [(False, screening)]
    if policy.opt_out_mode == "soft" and any(node.has_opted_out for node in state.nodes.values()):
        variants.append((True, None))
    failures: list[Failure] = []
    nodes_explained: dict[str, str] | None = dict(screening.failures) if explain else None
    for include_opted_out, found in variants:
        current = found or screen_nodes(
            state, pod, need, pod.priority, include_opted_out=True, want_failures=explain
        )
        if not current.bounds:
            continue
        current.augment = False  # the policies choose on resources; the spread is checked below
        shaping = Shaping(state, pod, need, policy, include_opted_out, {})
        choice = _no_new_victims(current)
        name = "none needed"
        if choice is None:
            name, result = decide(shaping, current, policy, explain)
            if not isinstance(result, Choice):
                failures.extend(result)
                continue
            choice = result
        best = choice.victims
        if current.spread is not None and not current.spread.holds(best.node, best.victims):
            reason = (
                f"the policies' victims on {best.node} ({describe_victims(best)}) leave the pod's "
                "topology spread constraints unsatisfied (policies do not choose by spread)"
            )
            return unresolved(pod.key, with_note(reason, pod.priority_note), nodes_explained)
        if nodes_explained is not None:
            nodes_explained.update(_explained(choice, name))
        how = f"by {choice.how}"
        policies = active_policies(policy, opted_out=include_opted_out)
        if policies:
            how += f"; policies: {policies}"
        return _preempting(pod, best, how, nodes_explained)
    if not failures:
        reason = f"preemption is not helpful: {summarize_failures(screening.failures, len(state.nodes))}"
    elif all(f.kind == PDB for f in failures):
        reason = f"{PDB_STRICT_REASON}: {summarize(failures)}"
    else:
        reason = f"no victims under the policies ({active_policies(policy)}): {summarize(failures)}"
    if nodes_explained is not None:
        for failure in failures:
            nodes_explained[failure.node] = f"under the policies: {FAILURE_TEXT[failure.kind]}"
    return unresolved(pod.key, with_note(reason, pod.priority_note), nodes_explained)


def _no_new_victims(screening: Screening) -> Choice | None:
    """A candidate where lower-priority pods already terminating make room wins under every
    strategy (its bound is its exact key, below any with victims)."""
    best = min(screening.bounds)
    if best[0][3] != node_victims("", (), 0, 0).key[3]:
        return None
    name = screening.table.names[best[1]]
    return Choice(node_victims(name, (), 0, 0), "lower-priority pods already terminating", {})


def _explained(choice: Choice, strategy: str) -> dict[str, str]:
    best = choice.victims
    out: dict[str, str] = dict(choice.notes)
    for name, result in choice.evaluated.items():
        if isinstance(result, Failure):
            out[name] = f"under the policies: {FAILURE_TEXT[result.kind]}"
        elif result.node == best.node:
            out[name] = "chosen"
        elif (
            isinstance(result, NodeVictims)
            and strategy == "multiple"
            and len(result.victims) != len(best.victims)
        ):
            out[name] = (
                f"lost to {best.node} on fewest victims ({len(result.victims)} vs {len(best.victims)})"
            )
        elif isinstance(result, NodeVictims):
            out[name] = lost_because(result, best)
    if best.node:
        out[best.node] = "chosen"
    return out
