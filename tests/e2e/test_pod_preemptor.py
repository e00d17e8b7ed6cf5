"""priogate's preemptor mode through the real control plane: kube-scheduler runs
manifests/scheduler/'s profile (DefaultPreemption disabled) and the controller preempts for
single pods (--pod-preemption), in a control plane of its own (`python -m localcluster up
--preemptor=priogate` starts the same); the session's cluster is the default mode, where
kube-scheduler preempts.

Every scenario fills each kwok node with one low-priority pod a tenant (the built-in `edit`
role, tests/e2e/tenant.py) creates, taking all of the node's free cpu, then asks for room."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from localcluster import LocalCluster, Options
from localcluster.cluster import NODE_PREFIX
from localcluster.components import GRACEFUL_DELETE_ANNOTATION
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.preemption_record import CONDITION_REASON, OPT_OUT_LABEL, SCHEDULER_REASON
from priogate.resources import format_quantity, parse_quantity, pod_requests
from tests.builders import pod, priority_class
from tests.e2e.helpers import unique, wait_for
from tests.e2e.tenant import Tenant, make_tenant

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
GRACE = 4  # seconds a victim stays Terminating (kwok honours it for annotated pods)
QUIET = 15.0  # seconds a negative waits: more than the controller's 10 s resync


@pytest.fixture(scope="module")
def preemptor_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    options = Options(
        state_dir=tmp_path_factory.mktemp("preemptor"), nodes=2, webhook_workers=1, preemptor="priogate"
    )
    cluster = LocalCluster(options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


class Side:
    """One control plane, as the admin (`client`) and as a tenant."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.client: ApiClient = load_client(str(cluster.kubeconfig))
        self.api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.core = k8s.CoreV1Api(self.api)
        self.classes: list[str] = []
        self.tenants: list[Tenant] = []

    def tenant(self) -> Tenant:
        tenant = make_tenant(self.cluster, self.core, k8s.RbacAuthorizationV1Api(self.api))
        self.tenants.append(tenant)
        return tenant

    def priority_class(self, prefix: str, value: int, policy: str = "PreemptLowerPriority") -> str:
        name = unique(prefix)
        self.client.create(CLASSES, priority_class(name, value=value, preemption_policy=policy))
        self.classes.append(name)
        return name

    def end_scenario(self) -> None:
        """Delete the scenario's tenants (their namespaces and pods): the next one fills the
        nodes afresh."""
        for tenant in self.tenants:
            tenant.api_client.close()
            self.core.delete_namespace(tenant.namespace, propagation_policy="Background")
        self.tenants = []

    def close(self) -> None:
        self.end_scenario()
        for name in self.classes:
            try:
                self.client.delete(f"{CLASSES}/{name}")
            except ApiError as e:
                if e.status != 404:
                    raise
        self.api.close()

    # ---- the cluster's pods --------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(resource_path("v1", "pods", namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def free_cpu(self) -> dict[str, Fraction]:
        nodes = self.client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
        free = {n["metadata"]["name"]: parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes}
        for p in self.client.get("/api/v1/pods")["items"]:
            node = p["spec"].get("nodeName")
            if node in free and p["status"].get("phase") not in ("Succeeded", "Failed"):
                free[node] -= pod_requests(p).get("cpu", Fraction(0))
        return free

    def fill(self, tenant: Tenant, low: str, labels: dict[str, str] | None = None) -> list[str]:
        """One pod per kwok node taking all its free cpu, created by the tenant, Terminating for
        GRACE seconds once deleted. The tenant also forges priogate annotations on them: neither
        makes a pod immune (only the opt-out label does, and only where priogate preempts)."""

        def settled() -> bool:
            # Earlier scenarios' pods leave the nodes a little after their namespace is deleted:
            # sizing the fillers before that would leave room once they go.
            leaving = {
                n["metadata"]["name"]
                for n in self.client.get("/api/v1/namespaces")["items"]
                if (n.get("status") or {}).get("phase") == "Terminating"
            }
            return not [
                p
                for p in self.client.get("/api/v1/pods")["items"]
                if str(p["spec"].get("nodeName") or "").startswith(NODE_PREFIX)
                and (p["metadata"].get("deletionTimestamp") or p["metadata"]["namespace"] in leaving)
            ]

        wait_for(settled, 90, "no pod of an earlier scenario is left on the nodes")
        names = []
        for node, cpu in sorted(self.free_cpu().items()):
            quantity = format_quantity(Fraction(int(cpu * 1000), 1000))
            name = f"low-{node.removeprefix(NODE_PREFIX)}"
            manifest = pod(
                name,
                namespace=None,
                cpu=quantity,
                priority_class=low,
                node_selector={"kubernetes.io/hostname": node},
                labels=labels,
                annotations={
                    GRACEFUL_DELETE_ANNOTATION: "true",
                    "priogate.io/allow-preemption": "false",  # an annotation: not the opt-out label
                    "priogate.io/preemption": '{"forged": true}',
                },
            )
            manifest["spec"]["terminationGracePeriodSeconds"] = GRACE
            tenant.core.create_namespaced_pod(tenant.namespace, manifest)
            names.append(name)
        wait_for(
            lambda: all(self.running(tenant.namespace, n) for n in names), 90, "the low-priority pods run"
        )
        return names

    def running(self, namespace: str, name: str) -> bool:
        obj = self.pod(namespace, name)
        return obj is not None and (obj.get("status") or {}).get("phase") == "Running"

    def create(self, namespace: str, name: str, klass: str, cpu: str = "1") -> None:
        self.client.create(
            resource_path("v1", "pods", namespace), pod(name, namespace=None, cpu=cpu, priority_class=klass)
        )

    def disruption(self, namespace: str, names: list[str]) -> dict[str, str]:
        """Victim name -> the reason of its DisruptionTarget condition, for those that have one."""
        found = {}
        for name in names:
            for c in ((self.pod(namespace, name) or {}).get("status") or {}).get("conditions") or []:
                if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
                    found[name] = c.get("reason", "")
        return found

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]


@pytest.fixture(scope="module")
def priogate_cluster_side(preemptor_cluster: LocalCluster) -> Iterator[Side]:
    side = Side(preemptor_cluster)
    yield side
    side.close()


@pytest.fixture(scope="module")
def default_cluster_side(cluster: LocalCluster) -> Iterator[Side]:
    side = Side(cluster)
    yield side
    side.close()


@pytest.fixture
def priogate_side(priogate_cluster_side: Side) -> Iterator[Side]:
    """The preemptor mode, for one scenario."""
    yield priogate_cluster_side
    priogate_cluster_side.end_scenario()


@pytest.fixture
def default_side(default_cluster_side: Side) -> Iterator[Side]:
    """The default mode (the session's cluster), for one scenario."""
    yield default_cluster_side
    default_cluster_side.end_scenario()


def test_a_high_priority_pod_preempts_a_lower_one_with_priogates_condition_and_events(priogate_side: Side):
    side = priogate_side
    low, high = side.priority_class("low", 10), side.priority_class("high", 1000)
    tenant = side.tenant()
    ns = tenant.namespace
    fillers = side.fill(tenant, low)

    side.create(ns, "hi", high)
    wait_for(lambda: side.disruption(ns, fillers), 60, "a low-priority pod is marked for preemption")
    (victim, reason), *others = side.disruption(ns, fillers).items()
    assert reason == CONDITION_REASON and not others, side.disruption(ns, fillers)
    wait_for(lambda: side.running(ns, "hi"), 90, "the preemptor is bound and runs")
    assert (side.pod(ns, "hi") or {})["spec"]["nodeName"] == f"{NODE_PREFIX}{victim.removeprefix('low-')}"
    assert side.pod(ns, victim) is None
    assert all(side.running(ns, f) for f in fillers if f != victim), "one victim only"

    # Events are sent from the controller's event thread, after the writes they describe.
    def preempted() -> list[dict[str, Any]]:
        return [e for e in side.events(ns) if e["reason"] == "Preempted" and e["regarding"]["name"] == victim]

    wait_for(lambda: bool(preempted()), 30, "the victim's Preempted event is recorded")
    wait_for(
        lambda: any(e["reason"] == "Preempting" for e in side.events(ns)),
        30,
        "the preemptor's Preempting event is recorded",
    )
    events = side.events(ns)
    (event,) = preempted()
    assert event["reportingController"] == "priogate.io/controller"
    assert event["related"]["name"] == "hi"
    assert event["note"].startswith("Preempted by pod ")
    assert any(
        e["reason"] == "Preempting" and e["regarding"]["name"] == "hi" and e["type"] == "Normal"
        for e in events
    )
    # kube-scheduler did not preempt: its DefaultPreemption is off in this mode.
    assert not [
        e
        for e in events
        if e.get("reportingController") == "default-scheduler" and e["reason"] == "Preempted"
    ]


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

    # Preemptor mode: the same pods, the same ask, and nobody is preempted.
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

    # The controller is at work meanwhile: a pod that may preempt does.
    side.create(ns, "hi", high)
    wait_for(lambda: side.running(ns, "hi"), 90, "the preempting pod runs")
    assert set(side.disruption(ns, fillers).values()) <= {CONDITION_REASON}
