"""Gang preemption and the members' inter-pod affinity and host ports, through the real
control plane (a control plane of its own in the preemptor mode, three kwok nodes).

- A pod a tenant (the built-in `edit` role, `kubectl --as`) runs at low priority blocks a gang
  only through its node: it holds the host port every member needs, or its required
  anti-affinity (kubernetes.io/hostname) excludes the members, who also exclude each other.
  There is cpu to spare everywhere, so an engine blind to ports and affinity would answer
  "fits" and leave the last member pending for ever; priogate takes exactly that pod and the
  gang runs one member per node.
- A gang whose members' anti-affinity is over a topology key the engine does not model is
  refused: no victim, no record, and one Warning Event on the PodGroup that names the member
  and the key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from localcluster import LocalCluster
from localcluster.objects import NODE_PREFIX
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.resources import format_quantity, parse_quantity, pod_requests
from tests.builders import pod, podgroup, priority_class
from tests.e2e.controller_helpers import groups_path, pod_running, wait_phase
from tests.e2e.helpers import delete_namespace, ensure_namespace, unique, wait_for
from tests.e2e.preemptor_side import preemptor_cluster
from tests.e2e.tenant import Tenant, make_tenant

ANNOTATION = "priogate.io/preemption"
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
HOST = "kubernetes.io/hostname"
PORT = 7777
NODES = 3


class Side:
    def __init__(self, cluster: LocalCluster, api: k8s.ApiClient) -> None:
        self.cluster = cluster
        self.client = load_client(str(cluster.kubeconfig))
        self.core = k8s.CoreV1Api(api)
        self.rbac = k8s.RbacAuthorizationV1Api(api)


@pytest.fixture(scope="module")
def side(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    with preemptor_cluster(tmp_path_factory, "gangfit", nodes=NODES) as cluster:
        api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
        try:
            yield Side(cluster, api)
        finally:
            api.close()


@pytest.fixture
def tenant(side: Side) -> Iterator[Tenant]:
    made = make_tenant(side.cluster, side.core, side.rbac)
    try:
        yield made
    finally:
        made.api_client.close()
        delete_namespace(side.core, made.namespace)


@pytest.fixture
def namespace(side: Side) -> Iterator[str]:
    name = unique("e2e-gangfit")
    ensure_namespace(side.core, name)
    yield name
    delete_namespace(side.core, name)


def kwok_nodes(client: ApiClient) -> list[str]:
    nodes = client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
    return sorted(n["metadata"]["name"] for n in nodes)


def wait_nodes_clear(client: ApiClient, keep: set[str]) -> None:
    """Pods of earlier tests' namespaces leave the nodes a little after the namespace goes."""

    def clear() -> bool:
        return not [
            p
            for p in client.get("/api/v1/pods")["items"]
            if str(p["spec"].get("nodeName") or "").startswith(NODE_PREFIX)
            and p["metadata"]["namespace"] not in keep
        ]

    wait_for(clear, 120, "no pod of an earlier test is left on the kwok nodes")


def free_cpu(client: ApiClient) -> dict[str, Fraction]:
    """Per kwok node: allocatable cpu minus the requests of the unfinished pods bound to it."""
    free = {
        n["metadata"]["name"]: parse_quantity(n["status"]["allocatable"]["cpu"])
        for n in client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
    }
    for p in client.get("/api/v1/pods")["items"]:
        node = p["spec"].get("nodeName")
        if node in free and p["status"].get("phase") not in ("Succeeded", "Failed"):
            free[node] -= pod_requests(p).get("cpu", Fraction(0))
    return free


def high_class(client: ApiClient) -> str:
    name = unique("gangfit-high")
    client.create(CLASSES, priority_class(name, value=1000, preemption_policy=None))
    return name


def with_port(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": PORT, "hostPort": PORT}]
    return obj


def anti(
    obj: dict[str, Any], labels: dict[str, str], key: str = HOST, namespaces: list[str] | None = None
) -> dict[str, Any]:
    term: dict[str, Any] = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    if namespaces:
        term["namespaces"] = namespaces  # else the term selects pods of its own pod's namespace
    obj["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return obj


def create_gang(
    client: ApiClient, namespace: str, klass: str, size: int, shape: Callable[[dict], dict]
) -> list[str]:
    client.create(
        groups_path(namespace), podgroup("gang", namespace=None, min_member=size, priority_class=klass)
    )
    names = [f"m{i}" for i in range(size)]
    for name in names:
        member = pod(
            name,
            namespace=None,
            cpu="100m",
            limits={"cpu": "100m"},
            group="gang",
            priority_class=klass,
            labels={"app": "gang"},
        )
        client.create(resource_path("v1", "pods", namespace), shape(member))
    return names


def recorded(client: ApiClient, namespace: str) -> dict:
    annotations = client.get(groups_path(namespace, "gang"))["metadata"].get("annotations") or {}
    return json.loads(annotations.get(ANNOTATION, "{}"))


@pytest.mark.parametrize("blocker", ["hostPort", "anti-affinity"])
def test_the_pod_that_blocks_members_through_its_node_is_preempted(
    side: Side, tenant: Tenant, namespace: str, blocker: str
):
    client = side.client
    wait_nodes_clear(client, {tenant.namespace, namespace, "kube-system"})
    nodes = kwok_nodes(client)
    assert len(nodes) == NODES
    target = nodes[0]

    # The tenant's low-priority pod (no class: priority 0), pinned to one node.
    blocking = pod("blocker", namespace=None, cpu="100m", limits={"cpu": "100m"}, labels={"app": "loner"})
    blocking["spec"]["nodeSelector"] = {HOST: target}
    if blocker == "hostPort":
        with_port(blocking)
    else:
        anti(blocking, {"app": "gang"}, namespaces=[namespace])  # the gang's, not the tenant's
    tenant.kubectl.apply([blocking], namespace=tenant.namespace)
    wait_for(lambda: pod_running(client, tenant.namespace, "blocker"), 60, "the blocker runs")

    # Members need one node each: the same host port, or anti-affinity against each other.
    shape = with_port if blocker == "hostPort" else (lambda p: anti(p, {"app": "gang"}))
    members = create_gang(client, namespace, high_class(client), NODES, shape)

    wait_phase(client, namespace, "gang", "Running", timeout=120)

    def state() -> str:
        everything = [
            *client.get(resource_path("v1", "pods", namespace))["items"],
            *client.get(resource_path("v1", "pods", tenant.namespace))["items"],
        ]
        events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
        return json.dumps(
            {
                "pods": {p["metadata"]["name"]: p["spec"].get("nodeName") for p in everything},
                "events": [(e["reason"], e.get("note")) for e in events],
                "record": recorded(client, namespace),
            }
        )

    try:
        wait_for(lambda: recorded(client, namespace).get("applied") is True, 60, "the record is applied")
    except AssertionError as e:
        raise AssertionError(f"{e}: {state()}") from None
    record = recorded(client, namespace)
    assert [(v["namespace"], v["name"]) for v in record["victims"]] == [(tenant.namespace, "blocker")], record
    placed = {
        p["metadata"]["name"]: p["spec"].get("nodeName")
        for p in client.get(resource_path("v1", "pods", namespace))["items"]
    }
    assert sorted(placed[m] for m in members) == nodes, f"one member per node: {placed}"
    assert target in record["nominated"].values(), f"a member goes where the blocker was: {record}"
    wait_for(
        lambda: (
            "blocker"
            not in {
                p["metadata"]["name"]
                for p in client.get(resource_path("v1", "pods", tenant.namespace))["items"]
            }
        ),
        60,
        "the blocker is gone",
    )


def test_a_gang_with_anti_affinity_over_an_unmodelled_key_is_refused_with_an_event(
    side: Side, namespace: str
):
    client = side.client
    wait_nodes_clear(client, {namespace, "kube-system"})
    pods = resource_path("v1", "pods", namespace)
    # Low fillers take every node's free cpu: the members need preemption.
    fillers = []
    for node, cpu in free_cpu(client).items():
        free = format_quantity(cpu)
        filler = pod(f"fill-{node.removeprefix(NODE_PREFIX)}", namespace=None, cpu=free, limits={"cpu": free})
        filler["spec"]["nodeSelector"] = {HOST: node}
        client.create(pods, filler)
        fillers.append(filler["metadata"]["name"])
    wait_for(lambda: all(pod_running(client, namespace, f) for f in fillers), 90, "the fillers run")

    klass = high_class(client)
    create_gang(client, namespace, klass, 2, lambda p: anti(p, {"app": "gang"}, "example.com/rack"))

    def refusals() -> list[dict]:
        events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
        return [
            e
            for e in events
            if e["regarding"]["kind"] == "PodGroup"
            and e["regarding"]["name"] == "gang"
            and e["reason"] == "PreemptionRefused"
        ]

    wait_for(lambda: bool(refusals()), 120, "a Warning Event refuses the gang's preemption")
    (event,) = refusals()
    assert event["type"] == "Warning"
    assert f"member {namespace}/m" in event["note"] and "example.com/rack" in event["note"], event["note"]
    time.sleep(10)  # further reconciles of the stuck group tell it no more
    assert len(refusals()) == 1, [e["note"] for e in refusals()]
    assert ANNOTATION not in (client.get(groups_path(namespace, "gang"))["metadata"].get("annotations") or {})
    for name in fillers:
        assert pod_running(client, namespace, name)
        assert not client.get(f"{pods}/{name}")["metadata"].get("deletionTimestamp"), f"{name} was preempted"
