"""The controller through the real control plane: PodGroup phases as pods come, run, go and
finish, one tenant's waiting gang and another tenant's groups, and stale reservations reclaimed
from the ledger. The test run's controller (started by localcluster, leader-elected) does the
work."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from fractions import Fraction

import pytest
from kubernetes import client as k8s

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, entries_of, ledger_object, ledger_of, ledger_path
from priogate.ledger.model import Entry
from priogate.resources import parse_quantity
from tests.builders import pod, podgroup
from tests.e2e.controller_helpers import delete_pod, groups_path, phase, pod_running, wait_phase
from tests.e2e.helpers import wait_for
from tests.e2e.preemptor_side import Side, millicpu
from tests.e2e.tenant import Tenant, tenant_fixture
from tests.e2e.test_podgroup_quota import create_quota


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


def condition(group: dict, type_: str) -> dict:
    return next(c for c in group["status"]["conditions"] if c["type"] == type_)


def test_phases_follow_quota_and_members(client: ApiClient, namespace: str):
    pods = resource_path("v1", "pods", namespace)
    create_quota(client, namespace, "4")
    # 2 of the 4 quota cpus are used by a pod outside any group.
    client.create(pods, pod("filler", namespace=None, cpu="2", limits={"cpu": "2"}))
    wait_for(lambda: pod_running(client, namespace, "filler"), 60, "the filler pod runs")
    wait_for(
        lambda: (
            client.get(resource_path("v1", "resourcequotas", namespace, "compute"))["status"]["used"]["cpu"]
            == "2"
        ),
        60,
        "the quota counts the filler",
    )

    # minResources 3 is within the quota (the webhook admits it) but not within what is free.
    client.create(
        groups_path(namespace), podgroup("gang", namespace=None, min_member=3, min_resources={"cpu": "3"})
    )
    group = wait_phase(client, namespace, "gang", "Pending")
    unschedulable = condition(group, "Unschedulable")
    assert unschedulable["status"] == "True" and unschedulable["reason"] == "NotEnoughResources"
    assert "quota compute insufficient" in unschedulable["message"]

    delete_pod(client, namespace, "filler")
    group = wait_phase(client, namespace, "gang", "Inqueue")
    assert condition(group, "Unschedulable")["status"] == "False"

    for i in range(3):
        client.create(pods, pod(f"m{i}", namespace=None, cpu="1", limits={"cpu": "1"}, group="gang"))
    group = wait_phase(client, namespace, "gang", "Running")
    wait_for(
        lambda: client.get(groups_path(namespace, "gang"))["status"].get("running") == 3,
        60,
        "status.running is 3",
    )
    scheduled = condition(client.get(groups_path(namespace, "gang")), "Scheduled")
    assert scheduled["status"] == "True" and scheduled["message"] == "3/3 members scheduled"

    # Losing members below minMember while one still runs: the gang is broken but alive.
    delete_pod(client, namespace, "m0")
    delete_pod(client, namespace, "m1")
    group = wait_phase(client, namespace, "gang", "Unknown")
    assert condition(group, "Unschedulable")["reason"] == "GangBroken"

    # None left: back through Pending, and enqueued again since the quota is free.
    delete_pod(client, namespace, "m2")
    group = wait_phase(client, namespace, "gang", "Inqueue")
    assert group["status"]["running"] == 0

    # Every phase change is an Event on the PodGroup (what `kubectl describe podgroup` shows).
    def phase_events() -> list[tuple[str, str, str]]:
        events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
        mine = [e for e in events if e["regarding"]["name"] == "gang" and e.get("action") == "UpdatePhase"]
        return [(e["type"], e["reason"], e["note"]) for e in sorted(mine, key=lambda e: e["eventTime"])]

    wait_for(lambda: len(phase_events()) >= 6, 30, "six phase-change events on the PodGroup")
    seen = phase_events()
    assert [reason for _, reason, _ in seen][:6] == [
        "Pending",
        "Inqueue",
        "Running",
        "Unknown",
        "Pending",
        "Inqueue",
    ]
    assert seen[0] == ("Normal", "Pending", f"phase none -> Pending: {unschedulable['message']}")
    assert seen[3][:2] == ("Warning", "Unknown")


def test_a_finished_gang_is_completed(client: ApiClient, namespace: str):
    client.create(groups_path(namespace), podgroup("batch", namespace=None, min_member=3))
    # kwok finishes Job pods as soon as they run.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch"},
        "spec": {
            "completions": 3,
            "parallelism": 3,
            "template": {
                "metadata": {"annotations": {"scheduling.k8s.io/group-name": "batch"}},
                "spec": {
                    **pod("x", namespace=None, cpu="100m", limits={"cpu": "100m"})["spec"],
                    "restartPolicy": "Never",
                },
            },
        },
    }
    client.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    group = wait_phase(client, namespace, "batch", "Completed", timeout=90)
    assert group["status"]["succeeded"] == 3
    assert group["status"]["running"] == 0


@pytest.fixture
def other_tenant(
    cluster: LocalCluster, core: k8s.CoreV1Api, rbac: k8s.RbacAuthorizationV1Api
) -> Iterator[Tenant]:
    """A second tenant: another namespace, another user with `edit` there only."""
    yield from tenant_fixture(cluster, core, rbac)


IDLE_PER_NODE = Fraction(2)


def tenant_group(name: str, min_member: int, cpu: int) -> dict:
    """A PodGroup manifest as a user writes it: no uid or creationTimestamp of the builder's."""
    group = podgroup(name, namespace=None, min_member=min_member, min_resources={"cpu": str(cpu)})
    group["metadata"] = {"name": name}
    return group


def test_one_tenants_waiting_gang_does_not_stall_another_tenants_group(
    client: ApiClient, tenant: Tenant, other_tenant: Tenant, default_side: Side
):
    # Tenant a's pods fill every kwok node but IDLE_PER_NODE cpus.
    create_quota(client, tenant.namespace, "100")
    default_side.settle()
    fillers = []
    for i, (node, free) in enumerate(sorted(default_side.free_cpu().items())):
        filler = pod(
            f"filler-{i}",
            namespace=None,
            cpu=millicpu(free - IDLE_PER_NODE),
            node_selector={"kubernetes.io/hostname": node},
        )
        tenant.core.create_namespaced_pod(tenant.namespace, filler)
        fillers.append(filler["metadata"]["name"])
    default_side.wait_running(tenant.namespace, fillers, "the fillers run")
    nodes = client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
    allocatable = sum(parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes)
    idle = IDLE_PER_NODE * len(nodes)
    big = 20
    assert idle < big <= allocatable, (idle, allocatable)

    # Tenant a's gang fits the allocatable but not what is idle: it waits.
    tenant.create_podgroup(tenant_group("big", 4, big))
    waiting = wait_phase(client, tenant.namespace, "big", "Pending")
    assert "cluster capacity insufficient" in condition(waiting, "Unschedulable")["message"]

    # Tenant b's small group, created after it in another namespace (kubectl --as tenant b),
    # fits what is idle: it goes in while tenant a's gang still waits. creationTimestamp counts
    # whole seconds and equal ones are ordered by namespace/name: a second apart, b's is younger.
    time.sleep(1.0)
    other_tenant.kubectl.apply([tenant_group("small", 1, 1)], namespace=other_tenant.namespace)
    created = client.get(groups_path(other_tenant.namespace, "small"))["metadata"]["creationTimestamp"]
    assert created > waiting["metadata"]["creationTimestamp"]
    try:
        wait_phase(client, other_tenant.namespace, "small", "Inqueue", timeout=45)
    except AssertionError as e:
        status = client.get(groups_path(other_tenant.namespace, "small")).get("status") or {}
        raise AssertionError(f"{e}; its conditions: {status.get('conditions')}") from None
    assert phase(client, tenant.namespace, "big") == "Pending"

    # Within tenant a's namespace the order holds: its younger small group waits behind the gang.
    time.sleep(1.0)
    tenant.create_podgroup(tenant_group("small", 1, 1))
    behind = wait_phase(client, tenant.namespace, "small", "Pending")
    assert "older waiting PodGroups of its namespace" in condition(behind, "Unschedulable")["message"]
    assert phase(client, tenant.namespace, "big") == "Pending"


def _inject_stale_entry(client: ApiClient, namespace: str, key: str) -> dict:
    admitted = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    stale = Entry("never-stored", key, {"cpu": "1"}, 1, "", admitted)
    for _ in range(10):
        obj = client.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))
        ledger = ledger_of(obj)
        ledger = ledger.with_entries({**ledger.entries, key: stale})
        version = obj["metadata"]["resourceVersion"]
        try:
            return client.replace(
                ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace),
                ledger_object(DEFAULT_LEDGER_NAMESPACE, namespace, ledger, version),
            )  # carries the resourceVersion read
        except ApiError as e:
            if e.status != 409:
                raise
    raise AssertionError("the ledger kept changing")


def test_stale_reservation_is_reclaimed(client: ApiClient, namespace: str):
    create_quota(client, namespace, "4")
    created = client.create(
        groups_path(namespace), podgroup("real", namespace=None, min_member=1, min_resources={"cpu": "1"})
    )
    uid = created["metadata"]["uid"]
    wait_for(
        lambda: uid in entries_of(client.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))),
        30,
        "the webhook reserved for it",
    )

    stale_uid = "00000000-0000-0000-0000-00000000dead"
    # The written object, not a re-read: the controller may reclaim the entry at once.
    assert stale_uid in entries_of(_inject_stale_entry(client, namespace, stale_uid))

    wait_for(
        lambda: stale_uid not in entries_of(client.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))),
        60,
        "the controller removed the stale reservation",
    )
    assert uid in entries_of(client.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))), (
        "a live group's reservation was removed"
    )
