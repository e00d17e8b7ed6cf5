"""The controller's enqueue flags through a real control plane of their own, as a tenant (the
built-in `edit` role): `--no-enqueue` admits a group at once, so its members are never held;
`--enqueue-order=fcfs` keeps a namespace's younger higher-priority group behind an older one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from localcluster import LocalCluster, Options
from priogate import gate
from priogate.kube.client import load_client, resource_path
from priogate.resources import parse_quantity
from tests.builders import pod, podgroup, priority_class
from tests.e2e.controller_helpers import phase, wait_phase
from tests.e2e.helpers import unique, wait_for
from tests.e2e.preemptor_side import millicpu
from tests.e2e.tenant import Tenant, make_tenant

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


def started(tmp_path_factory: pytest.TempPathFactory, name: str, *args: str) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        Options(state_dir=tmp_path_factory.mktemp(name), nodes=2, webhook_workers=1, controller_args=args)
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def no_enqueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from started(tmp_path_factory, "no-enqueue", "--no-enqueue")


@pytest.fixture(scope="module")
def fcfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from started(tmp_path_factory, "fcfs", "--enqueue-order=fcfs")


def tenant_of(cluster: LocalCluster) -> Tenant:
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    return make_tenant(cluster, k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api))


def manifest(name: str, cpu: str, priority_class: str | None = None, min_member: int = 1) -> dict[str, Any]:
    group = podgroup(
        name, namespace=None, min_member=min_member, min_resources={"cpu": cpu}, priority_class=priority_class
    )
    group["metadata"] = {"name": name}
    return group


def test_without_the_enqueue_wait_a_group_is_admitted_at_once(no_enqueue: LocalCluster):
    client = load_client(str(no_enqueue.kubeconfig))
    tenant = tenant_of(no_enqueue)
    # Far more than the cluster holds: with the wait it would stay Pending.
    tenant.kubectl.apply([manifest("huge", "1000")], namespace=tenant.namespace)
    wait_phase(client, tenant.namespace, "huge", "Inqueue", timeout=60)
    member = pod("m0", namespace=None, cpu="100m", limits={"cpu": "100m"}, group="huge")
    member["metadata"] = {"name": "m0", "annotations": {"scheduling.k8s.io/group-name": "huge"}}
    tenant.kubectl.apply([member], namespace=tenant.namespace)

    def bound() -> bool:
        obj = client.get(resource_path("v1", "pods", tenant.namespace, "m0"))
        return bool(obj["spec"].get("nodeName")) and not gate.has_gate(obj)

    wait_for(bound, 60, "the member of an admitted group is bound, no gate left")


def test_fcfs_keeps_a_younger_higher_priority_group_behind_an_older_one(fcfs: LocalCluster):
    client = load_client(str(fcfs.kubeconfig))
    tenant = tenant_of(fcfs)
    high = unique("high")
    client.create(CLASSES, priority_class(high, value=1000, preemption_policy="Never"))
    nodes = client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
    allocatable = sum(parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes)
    # The older group asks for more than the cluster holds today but not more than its
    # allocatable: it waits. Fillers keep all but 2 cpu busy.
    for i, n in enumerate(nodes):
        cpu = parse_quantity(n["status"]["allocatable"]["cpu"]) - Fraction(1)
        filler = pod(
            f"f{i}",
            namespace=None,
            cpu=millicpu(cpu),
            node_selector={"kubernetes.io/hostname": n["metadata"]["name"]},
        )
        client.create(resource_path("v1", "pods", tenant.namespace), filler)
    tenant.kubectl.apply([manifest("older", millicpu(allocatable - Fraction(1)))], namespace=tenant.namespace)
    wait_phase(client, tenant.namespace, "older", "Pending", timeout=60)
    time.sleep(1.1)  # creation times count whole seconds: the younger is a second younger
    tenant.kubectl.apply([manifest("younger", "1", priority_class=high)], namespace=tenant.namespace)
    held = wait_phase(client, tenant.namespace, "younger", "Pending", timeout=60)
    message = next(c["message"] for c in held["status"]["conditions"] if c["type"] == "Unschedulable")
    assert "older waiting PodGroups of its namespace" in message, message
    assert phase(client, tenant.namespace, "older") == "Pending"
