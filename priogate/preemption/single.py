"""Preemption for one pending pod, with kube-scheduler parity (DefaultPreemption).

Eligibility (preemptionPolicy Never; earlier victims still terminating on the nominated
node), then every node screened, victims chosen per node by the reprieve loop, and the node
picked by kube-scheduler's order. Opt-out "soft" mode retries with opted-out pods allowed
only when no node works without them (YuniKorn's "victimised last").
"""

from __future__ import annotations

from priogate.preemption.fit import need_of, static_failure
from priogate.preemption.nodes import choose_node, screen_nodes
from priogate.preemption.outcome import (
    Outcome,
    describe_victims,
    fits,
    lost_because,
    summarize_failures,
    unresolved,
    with_note,
)
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import NEVER, PodInfo
from priogate.preemption.state import ClusterState

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


def preempt_pod(state: ClusterState, pod: PodInfo, *, policy: PreemptionPolicy, explain: bool) -> Outcome:
    need = need_of(state.vectors[pod.key])
    screening = screen_nodes(state, pod, need, pod.priority, include_opted_out=False, want_failures=explain)
    if screening.fits_on:
        return fits(pod.key)
    if pod.preemption_policy == NEVER:
        return unresolved(pod.key, with_note(NOT_ELIGIBLE_NEVER, pod.priority_note))
    if pod.nominated_node and waiting_for_victims(state, pod):
        return unresolved(pod.key, with_note(NOT_ELIGIBLE_TERMINATING, pod.priority_note))
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
    if nodes_explained is not None:
        for name, result in evaluated.items():
            nodes_explained[name] = "chosen" if result is best else lost_because(result, best)
    reason = (
        f"preempt on {best.node}: {describe_victims(best)}; "
        f"best of {len(screening.bounds)} candidate node(s) by kube-scheduler's node order"
    )
    return Outcome(
        preemptor=pod.key,
        status="preempt",
        reason=with_note(reason, pod.priority_note),
        node=best.node,
        placements={pod.key: best.node},
        victims=best.victims,
        nodes=nodes_explained,
        clear_below=pod.priority,
    )
