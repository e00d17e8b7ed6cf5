"""The preemption policies that shape *whether and which* pods go, live: a control plane in the
preemptor mode (tests/e2e/preemptor_side.py: kube-scheduler's preemption, shaped by the preempt
extender the controller serves) whose controller runs

    --gang-aware-victims --qos-order --pdb-mode strict --preemption-start-delay=DELAY

The flags do not interfere with one another's scenarios: no scenario but the PDB one has a
PDB, the QoS scenario alone has
equal-priority victims of different QoS classes, the gang scenario alone has a PodGroup, and
the start delay only postpones each decision (every scenario waits for its victims long enough).

Small kwok nodes (4 cpu, 3 pods each) fill with few pods. Victims are the tenant's pods."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client as k8s

from localcluster.objects import NODE_PREFIX
from priogate.clock import epoch_seconds
from priogate.preemption_record import SCHEDULER_REASON
from tests.e2e.controller_helpers import wait_phase
from tests.e2e.helpers import wait_for
from tests.e2e.preemptor_side import Side, millicpu, preemptor_cluster
from tests.e2e.tenant import Tenant

DELAY = 6.0  # --preemption-start-delay, seconds
# kube-scheduler retries a pod the extender kept from preempting (the start delay) at its next
# flush of unschedulable pods: every 30 s, pods unschedulable for 5 s here (preemptor_side.py).
RETRY = 30.0 + 5.0
# How long a preemption may take here: the delay, a retry, and the victim's grace period.
PREEMPTS_WITHIN = DELAY + RETRY + 30


@pytest.fixture(scope="module")
def policies_cluster_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with preemptor_cluster(
        tmp_path_factory,
        "policies",
        "--gang-aware-victims",
        "--qos-order",
        "--pdb-mode=strict",
        f"--preemption-start-delay={DELAY}",
        node_cpu="4",
        node_pods=3,
    ) as cluster:
        side = Side(cluster)
        yield side
        side.close()


@pytest.fixture
def side(policies_cluster_side: Side) -> Iterator[Side]:
    yield policies_cluster_side
    policies_cluster_side.end_scenario()


def wait_disrupted(side: Side, namespace: str, names: list[str], what: str) -> dict[str, str]:
    wait_for(lambda: side.disruption(namespace, names), PREEMPTS_WITHIN, what, 0.2)
    return side.disruption(namespace, names)


# ---- gang-aware victims, in both modes ------------------------------------------------------------


def _gang_scenario(side: Side) -> tuple[str, list[str], list[str]]:
    """On every node a regular pod and one member of a running PodGroup whose minMember is the
    number of nodes (no surplus), both of the same low priority and together filling the node;
    then a high-priority pod that fits wherever either of them goes. The regular pods start
    first, so kube-scheduler, which reprieves equal priorities earliest-started first
    (util.MoreImportantPod), keeps them and takes a member."""
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    side.settle()
    free = side.free_cpu()
    halves = {node: Fraction(int(cpu * 1000) // 2, 1000) for node, cpu in free.items()}
    regulars = [
        side.place(tenant, f"reg-{node.removeprefix(NODE_PREFIX)}", node, low, millicpu(halves[node]))
        for node in sorted(free)
    ]
    side.wait_running(ns, regulars, "the regular pods run")
    # status.startTime has a resolution of one second: the members must start a second later.
    time.sleep(1.1)
    tenant.create_podgroup(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "gang"},
            "spec": {"minMember": len(free), "priorityClassName": low},
        }
    )
    members = [
        side.place(
            tenant,
            f"m-{node.removeprefix(NODE_PREFIX)}",
            node,
            low,
            millicpu(free[node] - halves[node]),
            group="gang",
        )
        for node in sorted(free)
    ]
    side.wait_running(ns, members, "the gang's members run")
    wait_phase(side.client, ns, "gang", "Running")
    need = min(min(halves[n], free[n] - halves[n]) for n in free)
    side.create(ns, "hi", high, cpu=millicpu(need))
    return ns, regulars, members


def test_a_single_pod_never_breaks_a_running_gang_with_gang_aware_victims_unlike_kube_scheduler(
    side: Side, default_side: Side
):
    ours, our_regulars, our_members = _gang_scenario(side)
    theirs, their_regulars, their_members = _gang_scenario(default_side)

    # Default mode: kube-scheduler takes one member and leaves the gang below minMember.
    wait_for(
        lambda: default_side.disruption(theirs, their_members + their_regulars),
        60,
        "kube-scheduler preempts a pod",
    )
    taken = default_side.disruption(theirs, their_members + their_regulars)
    assert list(taken.values()) == [SCHEDULER_REASON], taken
    assert set(taken) <= set(their_members), f"kube-scheduler took {taken}, not a gang member"
    default_side.wait_running(theirs, ["hi"], "the preemptor runs in the default mode")
    running = [m for m in their_members if default_side.running(theirs, m)]
    assert len(running) == len(their_members) - 1, "the gang is left below its minMember"

    # Preemptor mode with --gang-aware-victims: the extender replaces the member kube-scheduler
    # chose by the regular pod on that node; every member stays.
    taken = wait_disrupted(side, ours, our_members + our_regulars, "kube-scheduler preempts a pod")
    assert len(taken) == 1 and set(taken) <= set(our_regulars), f"priogate took {taken}"
    side.wait_running(ours, ["hi"], "the preemptor runs in the preemptor mode")
    assert all(side.running(ours, m) for m in our_members), "a gang member was preempted"
    assert not side.disruption(ours, our_members)


# ---- the start delay ------------------------------------------------------------------------------


def test_a_pod_preempts_only_once_it_has_been_unschedulable_for_the_start_delay(side: Side):
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low)

    side.create(ns, "hi", high)
    wait_for(lambda: side.unschedulable(ns, "hi"), 30, "kube-scheduler marks the pod unschedulable")
    since = epoch_seconds((side.unschedulable(ns, "hi") or {})["lastTransitionTime"])
    marks: list[dict[str, Any]] = []

    def marked_victims() -> bool:
        # Read the condition as soon as it shows: the victim is gone GRACE seconds later.
        conditions = (side.condition(ns, f, "DisruptionTarget") for f in fillers)
        marks.extend(c for c in conditions if c is not None and c.get("status") == "True")
        return bool(marks)

    wait_for(marked_victims, PREEMPTS_WITHIN, "the pod preempts once the delay has passed", 0.2)
    assert len(marks) == 1, marks
    marked = epoch_seconds(marks[0]["lastTransitionTime"])
    waited = marked - since
    # Both times are the API's: the victim was marked no sooner than the delay after the pod
    # became unschedulable, and no later than kube-scheduler's next retry after it.
    assert DELAY <= waited <= DELAY + RETRY + 3, f"marked {waited:.1f} s after unschedulable"
    side.wait_running(ns, ["hi"], "the preemptor runs")


# ---- QoS order --------------------------------------------------------------------------------------


def _qos_pod(side: Side, tenant: Tenant, name: str, node: str, low: str, qos: str) -> str:
    if qos == "BestEffort":
        return side.place(tenant, name, node, low, None)
    if qos == "Burstable":
        return side.place(tenant, name, node, low, "1")
    return side.place(tenant, name, node, low, "1", memory="64Mi", limits={"cpu": "1", "memory": "64Mi"})


def test_among_equal_priorities_a_best_effort_pod_goes_first_with_qos_order(side: Side):
    """The node is full by its pod count (3): a BestEffort preemptor needs one pod to go, and
    any one will do. The BestEffort pod started first, so kube-scheduler's order (the latest
    started goes first) would take the Guaranteed one; --qos-order takes the BestEffort one."""
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    side.settle()
    node = f"{NODE_PREFIX}0"
    pods = []
    for qos in ("BestEffort", "Burstable", "Guaranteed"):
        pods.append(_qos_pod(side, tenant, qos.lower(), node, low, qos))
        side.wait_running(ns, pods, f"the {qos} pod runs")
        time.sleep(1.1)  # status.startTime has a resolution of one second
    classes = {p: (side.pod(ns, p) or {})["status"].get("qosClass") for p in pods}
    assert classes == {"besteffort": "BestEffort", "burstable": "Burstable", "guaranteed": "Guaranteed"}

    side.create(ns, "hi", high, cpu=None, node_selector={"kubernetes.io/hostname": node})
    taken = wait_disrupted(side, ns, pods, "the BestEffort preemptor preempts")
    assert list(taken) == ["besteffort"], taken
    side.wait_running(ns, ["hi"], "the preemptor runs")
    assert side.running(ns, "burstable") and side.running(ns, "guaranteed")


# ---- --pdb-mode strict ------------------------------------------------------------------------------


def _pdb(min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "guard"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "guarded"}}},
    }


def _disruptions_allowed(tenant: Tenant, want: int) -> bool:
    """kube-controller-manager's disruption controller has computed the PDB's current spec."""
    got = k8s.PolicyV1Api(tenant.api_client).read_namespaced_pod_disruption_budget("guard", tenant.namespace)
    status = got.status
    return (
        status is not None
        and status.observed_generation == got.metadata.generation
        and status.disruptions_allowed == want
    )


def test_strict_pdb_mode_leaves_the_pod_pending_with_a_reason_then_preempts_once_the_pdb_allows(side: Side):
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low, labels={"app": "guarded"})
    policy = k8s.PolicyV1Api(tenant.api_client)
    policy.create_namespaced_pod_disruption_budget(ns, _pdb(len(fillers)))
    wait_for(lambda: _disruptions_allowed(tenant, 0), 60, "the PDB allows no disruption")

    side.create(ns, "hi", high)

    def blocked() -> list[dict[str, Any]]:
        return [
            e
            for e in side.events(ns)
            if e["reason"] == "PreemptionBlocked" and e["regarding"]["name"] == "hi"
        ]

    # The extender keeps no node (after the start delay) and says why: the Event is the
    # positive control that the absence below is a decision, not idleness.
    wait_for(lambda: blocked(), PREEMPTS_WITHIN, "priogate says the PDB blocks the preemption")
    event = blocked()[0]
    assert event["type"] == "Warning"
    assert "PodDisruptionBudget" in event["note"] and "--pdb-mode strict" in event["note"], event["note"]
    assert not side.disruption(ns, fillers), "a PDB-protected pod was preempted"
    assert all(side.running(ns, f) for f in fillers)
    hi = side.pod(ns, "hi") or {}
    assert not hi["spec"].get("nodeName") and not (hi.get("status") or {}).get("nominatedNodeName")

    # One disruption allowed: the extender keeps the nodes whose victim the PDB allows, and
    # kube-scheduler preempts one pod (it deletes: the extender cannot make it evict).
    policy.patch_namespaced_pod_disruption_budget("guard", ns, {"spec": {"minAvailable": len(fillers) - 1}})
    wait_for(lambda: _disruptions_allowed(tenant, 1), 60, "the PDB allows one disruption")
    taken = wait_disrupted(side, ns, fillers, "kube-scheduler preempts a pod once the PDB allows it")
    assert list(taken.values()) == [SCHEDULER_REASON], taken
    side.wait_running(ns, ["hi"], "the preemptor runs")
    assert sum(side.running(ns, f) for f in fillers) == len(fillers) - 1, "only one victim"
    (victim,) = taken
    assert any(
        e["reason"] == "Preempted"
        and e["regarding"]["name"] == victim
        and e["reportingController"] == "default-scheduler"
        for e in side.events(ns)
    )
    # Told once: every attempt in between was answered the same, and said nothing more.
    assert len(blocked()) == 1, [e["note"] for e in blocked()]
