"""Preemption sees what kube-scheduler's filters see, in both modes: the default mode
(kube-scheduler alone) and the preemptor mode (`--preemptor=priogate`: kube-scheduler's
DefaultPreemption shaped by priogate's preempt extender, served by the controller).

A pod blocked only by its own required anti-affinity against a lower-priority pod, only by a
lower-priority pod's anti-affinity against it, or only by a hostPort, preempts that pod in both
modes: kube-scheduler's dry run (SelectVictimsOnNode) runs every filter, and the extender, which
cannot model those filters, keeps the scheduler's victims. The victims are a tenant's pods (the
built-in `edit` role, tests/e2e/tenant.py).

And the extender's failure mode: it is not ignorable, so with the controller down the pod does
not preempt, and kube-scheduler's FailedScheduling event says why; once the controller serves
again, the pod preempts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.components import GRACEFUL_DELETE_ANNOTATION
from priogate.kube.client import resource_path
from priogate.preemption_record import SCHEDULER_REASON
from tests.builders import pod
from tests.e2e.helpers import wait_for
from tests.e2e.preemptor_side import GRACE, QUIET, Side, preemptor_cluster
from tests.e2e.tenant import Tenant

HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture(scope="module", params=["kube-scheduler", "priogate"])
def mode_side(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """Each mode's control plane: the test run's (default mode) or one in the preemptor mode,
    where kube-scheduler retries unschedulable pods every 10 s (its default is 5 minutes)."""
    if request.param == "kube-scheduler":
        yield request.getfixturevalue("default_cluster_side")
        return
    with preemptor_cluster(tmp_path_factory, "filters", unschedulable_flush_s=10) as cluster:
        side = Side(cluster)
        yield side
        side.close()


@pytest.fixture
def side(mode_side: Side) -> Iterator[Side]:
    yield mode_side
    mode_side.end_scenario()


def anti_affinity(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": HOSTNAME}
            ]
        }
    }


def manifest(name: str, klass: str, node: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A small pod pinned to `node` (plenty of room: only `spec` can block it)."""
    obj = pod(
        name,
        namespace=None,
        cpu="100m",
        priority_class=klass,
        node_selector={HOSTNAME: node},
        labels=labels,
        annotations={GRACEFUL_DELETE_ANNOTATION: "true"},
    )
    obj["spec"]["terminationGracePeriodSeconds"] = GRACE
    obj["spec"].update(spec)
    return obj


def host_port(port: int) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "ports": [{"containerPort": port, "hostPort": port, "protocol": "TCP"}],
            }
        ]
    }


def scenario(side: Side, victim_spec: dict[str, Any], preemptor_spec: dict[str, Any]) -> None:
    """The tenant's low-priority pod on one node, then a high-priority pod pinned there that only
    `victim_spec` / `preemptor_spec` keep out: it preempts that pod and runs there."""
    side.settle()
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant: Tenant = side.tenant()
    ns = tenant.namespace
    node = sorted(side.free_cpu())[0]
    victim = manifest("victim", low, node, {"app": "victim"}, **victim_spec)
    if "containers" in victim_spec:
        victim["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    tenant.core.create_namespaced_pod(ns, victim)
    side.wait_running(ns, ["victim"], "the tenant's low-priority pod runs")

    hi = manifest("hi", high, node, {"app": "hi"}, **preemptor_spec)
    if "containers" in preemptor_spec:
        hi["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    side.client.create(resource_path("v1", "pods", ns), hi)
    seen = side.disrupted_until_running(ns, ["victim"], "hi", 120)
    assert seen == {"victim": SCHEDULER_REASON}, seen
    assert (side.pod(ns, "hi") or {})["spec"]["nodeName"] == node
    wait_for(lambda: side.pod(ns, "victim") is None, 30, "the victim is gone")


def test_a_pods_own_anti_affinity_against_a_lower_priority_pod_preempts_it(side: Side):
    scenario(side, {}, {"affinity": anti_affinity({"app": "victim"})})


def test_a_lower_priority_pods_anti_affinity_against_the_pod_is_preempted(side: Side):
    scenario(side, {"affinity": anti_affinity({"app": "hi"})}, {})


def test_a_lower_priority_pod_holding_the_host_port_is_preempted(side: Side):
    scenario(side, host_port(8080), host_port(8080))


# The extender exists in the preemptor mode only: this test takes that mode's control plane alone.
@pytest.mark.parametrize("mode_side", ["priogate"], indirect=True)
def test_with_the_extender_down_the_pod_does_not_preempt_and_kube_scheduler_says_why(side: Side):
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low)
    controller = side.cluster.supervisor.get("controller")
    assert controller is not None
    side.cluster.supervisor.stop("controller")
    try:
        side.create(ns, "hi", high)
        deadline = time.monotonic() + QUIET
        while time.monotonic() < deadline:
            assert not side.disruption(ns, fillers), "preempted with the extender down"
            time.sleep(1)

        def failed() -> list[str]:
            return [
                e.get("note") or ""
                for e in side.events(ns)
                if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == "hi"
            ]

        wait_for(lambda: any("preempt" in n for n in failed()), 30, "FailedScheduling names the extender")
        note = next(n for n in failed() if "preempt" in n)
        assert "/scheduler/preempt" in note or "extender" in note, note
    finally:
        side.cluster.start_controller()
    seen = side.disrupted_until_running(ns, fillers, "hi", 120)
    assert set(seen.values()) == {SCHEDULER_REASON}, seen
