"""priogate's preemptor mode through the real control plane: kube-scheduler runs
manifests/scheduler/'s profile (DefaultPreemption with priogate's preempt extender) and the
controller serves the extender (--pod-preemption), in a control plane of its own (`python -m
localcluster up --preemptor=priogate` starts the same); the test run's cluster is the default
mode, where kube-scheduler preempts alone.

Every scenario fills each kwok node with one low-priority pod a tenant (the built-in `edit`
role, tests/e2e/tenant.py) creates, taking all of the node's free cpu, then asks for room."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.objects import NODE_PREFIX
from priogate.kube.client import resource_path
from priogate.preemption_record import OPT_OUT_LABEL, SCHEDULER_REASON
from tests.e2e.helpers import wait_for
from tests.e2e.preemptor_side import QUIET, Side, preemptor_cluster


@pytest.fixture(scope="module")
def priogate_cluster_side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with preemptor_cluster(tmp_path_factory, "preemptor") as cluster:
        side = Side(cluster)
        yield side
        side.close()


@pytest.fixture
def priogate_side(priogate_cluster_side: Side) -> Iterator[Side]:
    """The preemptor mode, for one scenario."""
    yield priogate_cluster_side
    priogate_cluster_side.end_scenario()


def test_a_high_priority_pod_preempts_a_lower_one_through_kube_scheduler_and_the_extender(
    priogate_side: Side,
):
    side = priogate_side
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low)
    asked = side.answers("unchanged")

    side.create(ns, "hi", high)
    wait_for(lambda: side.disruption(ns, fillers), 60, "a low-priority pod is marked for preemption")
    (victim, reason), *others = side.disruption(ns, fillers).items()
    assert reason == SCHEDULER_REASON and not others, side.disruption(ns, fillers)
    wait_for(lambda: side.running(ns, "hi"), 90, "the preemptor is bound and runs")
    assert (side.pod(ns, "hi") or {})["spec"]["nodeName"] == f"{NODE_PREFIX}{victim.removeprefix('low-')}"
    assert side.pod(ns, victim) is None
    assert all(side.running(ns, f) for f in fillers if f != victim), "one victim only"
    # kube-scheduler asked the extender, which kept its candidates as they were (default policy).
    assert side.answers("unchanged") > asked

    def preempted() -> list[dict[str, Any]]:
        return [e for e in side.events(ns) if e["reason"] == "Preempted" and e["regarding"]["name"] == victim]

    wait_for(lambda: bool(preempted()), 30, "the victim's Preempted event is recorded")
    (event,) = preempted()
    # kube-scheduler preempted (executor.go): its Event, naming the preemptor.
    assert event["reportingController"] == "default-scheduler"
    uid = (side.pod(ns, "hi") or {})["metadata"]["uid"]
    assert event["note"].startswith(f"Preempted by pod {uid} on node "), event["note"]


def _opted_out_scenario(side: Side) -> tuple[str, list[str]]:
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    fillers = side.fill(tenant, low, labels={OPT_OUT_LABEL: "false"})
    side.create(tenant.namespace, "hi", high)
    return tenant.namespace, fillers


def test_an_opted_out_pod_survives_in_the_preemptor_mode_and_not_under_kube_schedulers_preemption(
    priogate_side: Side, default_side: Side
):
    ours, our_fillers = _opted_out_scenario(priogate_side)
    theirs, their_fillers = _opted_out_scenario(default_side)

    # Default mode: kube-scheduler ignores the label and preempts one of them.
    wait_for(
        lambda: default_side.disruption(theirs, their_fillers), 60, "kube-scheduler preempts an opted-out pod"
    )
    assert set(default_side.disruption(theirs, their_fillers).values()) == {SCHEDULER_REASON}
    wait_for(lambda: default_side.running(theirs, "hi"), 90, "the preemptor runs in the default mode")

    # Preemptor mode: the same pods, the same ask, and nobody is preempted: the extender drops
    # every candidate (their victims are opted out, and no other pod is there to take).
    wait_for(lambda: priogate_side.answers("dropped-all") > 0, 30, "kube-scheduler asks the extender")
    deadline = time.monotonic() + QUIET
    while time.monotonic() < deadline:
        assert all(priogate_side.running(ours, f) for f in our_fillers), "an opted-out pod was preempted"
        assert not priogate_side.disruption(ours, our_fillers)
        time.sleep(1)
    hi = priogate_side.pod(ours, "hi") or {}
    assert not hi["spec"].get("nodeName") and not (hi.get("status") or {}).get("nominatedNodeName")


def test_a_never_pod_does_not_preempt(priogate_side: Side):
    side = priogate_side
    low = side.priority_class("low", 10)
    never = side.priority_class("never", 500, policy="Never")
    high = side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low)

    side.create(ns, "never", never)
    deadline = time.monotonic() + QUIET
    while time.monotonic() < deadline:
        assert not side.disruption(ns, fillers), "a preemptionPolicy Never pod preempted"
        time.sleep(1)
    assert not (side.pod(ns, "never") or {})["spec"].get("nodeName")

    # Preemption works meanwhile: a pod that may preempt does.
    side.create(ns, "hi", high)
    wait_for(lambda: side.running(ns, "hi"), 90, "the preempting pod runs")
    assert set(side.disruption(ns, fillers).values()) <= {SCHEDULER_REASON}


def test_a_stale_nomination_is_cleared_when_the_extender_keeps_no_node(priogate_side: Side):
    """The seed design clears a pod's nomination when no node can take it. kube-scheduler does so
    when it finds no candidate; when an extender drops them all it keeps the nomination
    (Preempt returns no NominatingInfo), so the controller clears it (uid precondition)."""
    side = priogate_side
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low, labels={OPT_OUT_LABEL: "false"})
    side.create(ns, "hi", high)
    wait_for(lambda: side.unschedulable(ns, "hi"), 30, "kube-scheduler marks the pod unschedulable")
    node = sorted(side.free_cpu())[0]
    # A nomination left from an earlier decision: nothing on that node can go for the pod now.
    side.client.request(
        "PATCH",
        resource_path("v1", "pods", ns, "hi") + "/status",
        body={"status": {"nominatedNodeName": node}},
        content_type="application/merge-patch+json",
    )
    assert (side.pod(ns, "hi") or {})["status"].get("nominatedNodeName") == node

    def cleared() -> bool:
        return not ((side.pod(ns, "hi") or {}).get("status") or {}).get("nominatedNodeName")

    # kube-scheduler retries the pod (an update, or its flush) and the extender keeps no node.
    wait_for(cleared, 60, "the controller clears the stale nomination", 0.2)
    assert not side.disruption(ns, fillers)

    def blocked() -> list[dict[str, Any]]:
        return [
            e
            for e in side.events(ns)
            if e["reason"] == "PreemptionBlocked" and e["regarding"]["name"] == "hi"
        ]

    wait_for(lambda: bool(blocked()), 30, "the controller says why no node is kept")
    assert "opted out" in blocked()[0]["note"], blocked()
