"""Gang preemption through the real control plane.

Low-priority pods fill every kwok node. A PodGroup whose class is high-priority needs three
members at once, and its members carry that class (a gang preempts at its members' admitted
priority, never at a class they were not given). These scenarios run on a control plane of
their own in the preemptor mode (kube-scheduler's preemption through priogate's extender, which
keeps no node for a member of a gang short of minMember), where a gang's members are left to gang
preemption: in the default mode kube-scheduler would preempt for each member
alone, one at a time, and a gang could run short of minMember.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from localcluster import LocalCluster
from localcluster.components import GRACEFUL_DELETE_ANNOTATION
from localcluster.objects import NODE_PREFIX
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.resources import format_quantity, parse_quantity, pod_requests
from tests.builders import pod, podgroup, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.controller_helpers import groups_path, pod_running, stuck_gang, wait_phase
from tests.e2e.helpers import delete_namespace, ensure_namespace, unique, wait_for
from tests.e2e.plugin import ok, plugin_runner
from tests.e2e.preemptor_side import preemptor_cluster

ANNOTATION = "priogate.io/preemption"
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


@dataclass
class Gangs:
    """The preemptor mode's control plane, as the admin."""

    cluster: LocalCluster
    client: ApiClient
    core: k8s.CoreV1Api

    def classes(self, value: int) -> tuple[str, str]:
        """A low class (10) and a high one (`value`), preemptionPolicy left to the default."""
        low, high = unique("low"), unique("high")
        self.client.create(CLASSES, priority_class(low, value=10, preemption_policy=None))
        self.client.create(CLASSES, priority_class(high, value=value, preemption_policy=None))
        return low, high


@pytest.fixture(scope="module")
def gangs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gangs]:
    with preemptor_cluster(tmp_path_factory, "gangs", nodes=3) as cluster:
        api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            yield Gangs(cluster, load_client(str(cluster.kubeconfig)), k8s.CoreV1Api(api))
        finally:
            api.close()


@pytest.fixture
def gang_namespace(gangs: Gangs) -> Iterator[str]:
    name = unique("e2e-gang")
    ensure_namespace(gangs.core, name)
    yield name
    delete_namespace(gangs.core, name)


def free_cpu(client: ApiClient) -> dict[str, Fraction]:
    """Per kwok node: allocatable cpu minus the requests of the unfinished pods bound to it."""
    nodes = client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
    free = {n["metadata"]["name"]: parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes}
    for p in client.get("/api/v1/pods")["items"]:
        node = p["spec"].get("nodeName")
        if node in free and p["status"].get("phase") not in ("Succeeded", "Failed"):
            free[node] -= pod_requests(p).get("cpu", Fraction(0))
    return free


def fill_nodes(
    client: ApiClient, namespace: str, low: str, graceful: int | None = None, group: str | None = None
) -> list[str]:
    """Fill each node with two low-priority pods taking all of its free cpu. `graceful`: their
    terminationGracePeriodSeconds, honoured by kwok (they stay Terminating that long). `group`:
    the PodGroup they are members of (a lower gang)."""
    pods = resource_path("v1", "pods", namespace)

    def others_gone() -> bool:
        # Pods of earlier tests' deleted namespaces leave the nodes a little after: sizing the
        # fillers before that would leave room once they go.
        leaving = {
            n["metadata"]["name"]
            for n in client.get("/api/v1/namespaces")["items"]
            if (n.get("status") or {}).get("phase") == "Terminating"
        }
        return not [
            p
            for p in client.get("/api/v1/pods")["items"]
            if str(p["spec"].get("nodeName") or "").startswith(NODE_PREFIX)
            and (p["metadata"]["namespace"] in leaving or p["metadata"].get("deletionTimestamp"))
        ]

    wait_for(others_gone, 90, "no pod of a deleted namespace is left on the nodes")
    fillers = []
    for node, cpu in sorted(free_cpu(client).items()):
        assert node.startswith(NODE_PREFIX)
        half = format_quantity(Fraction(int(cpu * 1000) // 2, 1000))
        for i in range(2):
            name = f"low-{node.removeprefix(NODE_PREFIX)}-{i}"
            manifest = pod(
                name,
                namespace=None,
                cpu=half,
                limits={"cpu": half},
                priority_class=low,
                node_selector={"kubernetes.io/hostname": node},
                annotations={GRACEFUL_DELETE_ANNOTATION: "true"} if graceful else None,
                group=group,
            )
            if graceful:
                manifest["spec"]["terminationGracePeriodSeconds"] = graceful
            client.create(pods, manifest)
            fillers.append(name)
    return fillers


def test_gang_preempts_lower_priority_pods(gangs: Gangs, gang_namespace: str, plugin_path: Path):
    client, namespace = gangs.client, gang_namespace
    low, high = gangs.classes(1000)
    pods = resource_path("v1", "pods", namespace)

    fillers = fill_nodes(client, namespace, low)
    wait_for(lambda: all(pod_running(client, namespace, f) for f in fillers), 90, "the fillers run")
    member_cpu = "3"
    assert all(cpu < 3 for cpu in free_cpu(client).values()), "the nodes should be full"

    client.create(
        groups_path(namespace),
        podgroup("gang", namespace=None, min_member=3, min_resources={"cpu": "9"}, priority_class=high),
    )
    for i in range(3):
        client.create(
            pods,
            pod(
                f"m{i}",
                namespace=None,
                cpu=member_cpu,
                limits={"cpu": member_cpu},
                group="gang",
                priority_class=high,
            ),
        )

    wait_phase(client, namespace, "gang", "Running", timeout=120)
    assert all(pod_running(client, namespace, f"m{i}") for i in range(3))

    def recorded() -> dict:
        annotations = client.get(groups_path(namespace, "gang"))["metadata"].get("annotations") or {}
        return json.loads(annotations.get(ANNOTATION, "{}"))

    wait_for(lambda: recorded().get("applied") is True, 60, "the preemption record is marked applied")
    record = recorded()
    victims = {v["name"] for v in record["victims"]}
    assert victims and victims <= set(fillers), record
    assert set(record["nominated"]) == {"m0", "m1", "m2"}
    left = {p["metadata"]["name"] for p in client.get(pods)["items"]} & set(fillers)
    assert left == set(fillers) - victims, "exactly the recorded victims are gone"
    # Each member needs 3 of a node's cpus and each filler holds half of a node: one victim per
    # node at least, never both fillers of every node.
    assert 3 <= len(victims) < len(fillers)

    # Events are sent from the controller's event thread, after the writes they describe.
    def reasons() -> set[tuple[str, str, str]]:
        events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
        return {(e["regarding"]["kind"], e["regarding"]["name"], e["reason"]) for e in events}

    wait_for(lambda: ("PodGroup", "gang", "Preempted") in reasons(), 30, "the gang's Preempted event")
    assert all(("Pod", v, "Preempted") in reasons() for v in victims)

    # Afterwards the victims are gone; `kubectl priogate why` still says who preempted them, from
    # the PodGroup's record and the Events.
    priogate = plugin_runner(plugin_path, gangs.cluster.kubeconfig)
    victim = sorted(victims)[0]
    text = ok(priogate("why", f"pod/{victim}", "-n", namespace))
    assert "State:          Preempted" in text
    assert f"preempted by priogate to make room for PodGroup {namespace}/gang" in text
    assert "the pod is gone" in text
    report = json.loads(ok(priogate("why", victim, "-n", namespace, "-o", "json")))
    assert any(
        e["reason"] == "Preempted" and e["from"] == "priogate.io/controller" for e in report["events"]
    ), report["events"]
    group = ok(priogate("why", "podgroup/gang", "-n", namespace))
    assert "State:          Running" in group
    assert f"{namespace}/{victim} on " in group, "the group's report names its victims"


def test_a_recorded_decision_is_resumed_not_recomputed(
    client: ApiClient, cluster: LocalCluster, namespace: str, classes: ClassTracker
):
    """As after a crash between recording a decision and applying it: the controller finishes
    exactly the recorded decision. The record is written with the controller's identity (the
    only one admission lets write it), for a group that needs preemption (its member cannot be
    placed), naming a pod of lower priority than the group."""
    high = classes.name("high")
    client.create("/apis/scheduling.k8s.io/v1/priorityclasses", priority_class(high, value=1000))
    pods = resource_path("v1", "pods", namespace)
    for name in ("keep", "victim"):
        client.create(pods, pod(name, namespace=None, cpu="100m", limits={"cpu": "100m"}))
    wait_for(lambda: all(pod_running(client, namespace, n) for n in ("keep", "victim")), 60, "pods run")
    victim_uid = client.get(f"{pods}/victim")["metadata"]["uid"]

    stuck_gang(client, namespace, "resumed", high)
    unapplied = {
        "id": "crashed0001",
        "decidedAt": time.time(),
        "victims": [{"namespace": namespace, "name": "victim", "uid": victim_uid, "node": ""}],
        "nominated": {},
        "reason": "recorded before a crash",
        "applied": False,
    }
    patch = {"metadata": {"annotations": {ANNOTATION: json.dumps(unapplied)}}}
    load_client(str(cluster.controller_kubeconfig)).request(
        "PATCH", groups_path(namespace, "resumed"), body=patch, content_type="application/merge-patch+json"
    )

    def record() -> dict:
        return json.loads(
            client.get(groups_path(namespace, "resumed"))["metadata"]["annotations"][ANNOTATION]
        )

    wait_for(lambda: record()["applied"] is True, 60, "the recorded decision is finished")
    assert record()["id"] == "crashed0001", "a second decision replaced the recorded one"
    assert not record().get("stopped"), record()
    wait_for(
        lambda: "victim" not in {p["metadata"]["name"] for p in client.get(pods)["items"]},
        60,
        "the victim is gone",
    )
    left = {p["metadata"]["name"] for p in client.get(pods)["items"]}
    assert "keep" in left


@pytest.mark.parametrize("tight_quota", [False, True], ids=["no-quota", "tight-quota"])
def test_victims_terminate_gracefully_marked_while_the_members_are_nominated(
    gangs: Gangs, gang_namespace: str, tight_quota: bool
):
    """Victims that take their grace period to go (kwok honours terminationGracePeriodSeconds
    for pods annotated so): while they are Terminating they carry DisruptionTarget (reason
    PreemptionByPriogate) and the gang's members carry status.nominatedNodeName; then the gang
    runs. The victims are a lower gang, taken whole.

    tight-quota: the gang's namespace has a ResourceQuota of exactly its minResources, which its
    created, unbound members already fill (kube-apiserver's quota admission charges a pod at
    creation). Counting them twice would demote the gang to Pending and strand it; it must
    preempt and run all the same. The victims live in another namespace."""
    client, core, namespace = gangs.client, gangs.core, gang_namespace
    low, high = gangs.classes(1000)
    pods = resource_path("v1", "pods", namespace)
    victims_ns = namespace
    if tight_quota:
        victims_ns = unique("e2e-victims")
        ensure_namespace(core, victims_ns)
        quota = {"metadata": {"name": "exact"}, "spec": {"hard": {"cpu": "9"}}}
        client.create(resource_path("v1", "resourcequotas", namespace), quota)
        wait_for(
            lambda: (
                "used"
                in (client.get(resource_path("v1", "resourcequotas", namespace, "exact")).get("status") or {})
            ),
            60,
            "the quota controller fills status.used (pods are refused until it has)",
        )
    try:
        _graceful_preemption(client, namespace, victims_ns, low, high, pods, tight_quota)
    finally:
        if victims_ns != namespace:
            delete_namespace(core, victims_ns)


def _graceful_preemption(
    client: ApiClient, namespace: str, victims_ns: str, low: str, high: str, pods: str, tight_quota: bool
) -> None:
    # The victims are a lower gang: all of them are its minMember, so taking any means taking
    # the whole group (a gang is never left below minMember).
    nodes = len(free_cpu(client))
    client.create(
        groups_path(victims_ns),
        podgroup("low-gang", namespace=None, min_member=2 * nodes, priority_class=low),
    )
    fillers = fill_nodes(client, victims_ns, low, graceful=8, group="low-gang")
    wait_for(lambda: all(pod_running(client, victims_ns, f) for f in fillers), 90, "the fillers run")
    wait_phase(client, victims_ns, "low-gang", "Running", timeout=60)

    client.create(
        groups_path(namespace),
        podgroup("gang", namespace=None, min_member=3, min_resources={"cpu": "9"}, priority_class=high),
    )
    for i in range(3):
        client.create(
            pods,
            pod(f"m{i}", namespace=None, cpu="3", limits={"cpu": "3"}, group="gang", priority_class=high),
        )

    if tight_quota:
        wait_for(
            lambda: (
                (client.get(resource_path("v1", "resourcequotas", namespace, "exact")).get("status") or {})
                .get("used", {})
                .get("cpu")
                == "9"
            ),
            30,
            "the created members fill the quota",
        )
    victim_pods = resource_path("v1", "pods", victims_ns)
    marked: set[str] = set()  # victims seen Terminating with priogate's DisruptionTarget
    nominated: set[str] = set()  # members seen nominated while a victim was Terminating
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        items = {p["metadata"]["name"]: p for p in client.get(pods)["items"]}
        items.update({p["metadata"]["name"]: p for p in client.get(victim_pods)["items"]})
        terminating = False
        for name in fillers:
            p = items.get(name)
            if p is None or not p["metadata"].get("deletionTimestamp"):
                continue
            terminating = True
            for c in p["status"].get("conditions") or []:
                if c["type"] == "DisruptionTarget" and c.get("reason") == "PreemptionByPriogate":
                    marked.add(name)
        if terminating:
            for i in range(3):
                m = items.get(f"m{i}") or {}
                if (m.get("status") or {}).get("nominatedNodeName") and not m["spec"].get("nodeName"):
                    nominated.add(f"m{i}")
        if all(pod_running(client, namespace, f"m{i}") for i in range(3)):
            break
        time.sleep(0.2)
    wait_phase(client, namespace, "gang", "Running", timeout=30)

    annotations = client.get(groups_path(namespace, "gang"))["metadata"].get("annotations") or {}
    victims = {v["name"] for v in json.loads(annotations[ANNOTATION])["victims"]}
    assert not json.loads(annotations[ANNOTATION]).get("stopped"), annotations[ANNOTATION]
    assert victims == set(fillers), "the lower gang goes whole: any one victim breaks its minMember"
    assert marked and marked <= victims, (marked, victims)
    assert marked == victims, (
        f"every victim was seen Terminating with DisruptionTarget: {marked} of {victims}"
    )
    assert nominated, "members carried status.nominatedNodeName while the victims terminated"
