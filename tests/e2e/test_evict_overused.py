"""Overused PodGroups evicted (`--evict-overused`) through a real control plane, as tenants (the
built-in `edit` role, `kubectl --as`): a tenant's group runs more members than its minimum while
another group of the namespace waits for the capacity they hold. With the flag, only the surplus
it lacks is evicted, newest first, through the Eviction API: a member a PodDisruptionBudget
protects and an opted-out member stay; Events say why. Another namespace's waiting group takes
nothing, and a waiting group the surplus cannot let in evicts nothing. Without the flag (the
default, the test run's cluster) nothing is evicted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from localcluster import LocalCluster, Options
from localcluster.components import GRACEFUL_DELETE_ANNOTATION
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.preemption_record import OPT_OUT_LABEL
from tests.builders import pod, podgroup
from tests.e2e.controller_helpers import phase, wait_phase
from tests.e2e.helpers import wait_for
from tests.e2e.preemptor_side import GRACE, QUIET, Side, millicpu
from tests.e2e.tenant import Tenant

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
FREE_PER_NODE = Fraction(2)


@pytest.fixture(scope="module")
def evicting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    cluster = LocalCluster(
        Options(
            state_dir=tmp_path_factory.mktemp("evict-overused"),
            nodes=2,
            webhook_workers=1,
            controller_args=("--evict-overused",),
        )
    )
    cluster.start()
    side = Side(cluster)
    try:
        yield side
    finally:
        side.close()
        cluster.stop()


def manifest(name: str, cpu: int, min_member: int = 1) -> dict[str, Any]:
    group = podgroup(name, namespace=None, min_member=min_member, min_resources={"cpu": str(cpu)})
    group["metadata"] = {"name": name}
    return group


def member(name: str, group: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A 1-cpu member, Terminating for GRACE seconds once deleted (its DisruptionTarget
    condition can be read meanwhile)."""
    body = pod(name, namespace=None, cpu="1", limits={"cpu": "1"}, group=group)
    body["metadata"] = {
        "name": name,
        "annotations": {GROUP_ANNOTATION: group, GRACEFUL_DELETE_ANNOTATION: "true"},
        "labels": labels or {},
    }
    body["spec"]["terminationGracePeriodSeconds"] = GRACE
    return body


def fill(side: Side, namespace: str, leave: Fraction) -> list[str]:
    """Pods of the admin in `namespace` fill every kwok node but `leave` cpu."""
    side.settle()
    names = []
    for i, (node, free) in enumerate(sorted(side.free_cpu().items())):
        filler = pod(
            f"filler-{i}",
            namespace=None,
            cpu=millicpu(free - leave),
            node_selector={"kubernetes.io/hostname": node},
        )
        side.client.create(resource_path("v1", "pods", namespace), filler)
        names.append(filler["metadata"]["name"])
    side.wait_running(namespace, names, "the fillers run")
    return names


def overused_group(side: Side, tenant: Tenant, count: int, labels: dict[str, dict[str, str]]) -> list[str]:
    """The tenant's group "over" (minMember 1, minResources 1 cpu), Running with `count` 1-cpu
    members created a second apart (creation times count whole seconds: newest first is an order)."""
    tenant.kubectl.apply([manifest("over", 1)], namespace=tenant.namespace)
    wait_phase(side.client, tenant.namespace, "over", "Inqueue")
    names = [f"o{i}" for i in range(count)]
    for name in names:
        tenant.kubectl.apply([member(name, "over", labels.get(name))], namespace=tenant.namespace)
        time.sleep(1.1)
    side.wait_running(tenant.namespace, names, "the overused group's members run")
    wait_phase(side.client, tenant.namespace, "over", "Running")
    return names


def present(client: ApiClient, namespace: str, name: str) -> bool:
    """Still there and not terminating."""
    try:
        obj = client.get(resource_path("v1", "pods", namespace, name))
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return not obj["metadata"].get("deletionTimestamp")


def events(client: ApiClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
    return [e for e in items if e.get("reason") == reason]


def evictions(client: ApiClient, namespace: str) -> list[str]:
    return sorted(e["regarding"]["name"] for e in events(client, namespace, "Evicted"))


def test_only_the_surplus_a_waiting_group_lacks_is_evicted(evicting: Side):
    side, client = evicting, evicting.client
    tenant = side.tenant()
    fill(side, tenant.namespace, FREE_PER_NODE)
    free = int(sum(side.free_cpu().values()))  # 2 nodes x 2 cpu
    assert free == 4, side.free_cpu()
    # o3, the newest, opted out; o2 protected by the tenant's PDB (it allows no disruption).
    labels = {"o3": {OPT_OUT_LABEL: "false"}, "o2": {"pdb": "keep"}}
    names = overused_group(side, tenant, free, labels)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"pdb": "keep"}}},
    }
    tenant.kubectl.apply([pdb], namespace=tenant.namespace)
    wait_for(
        lambda: (
            client.get(resource_path("policy/v1", "poddisruptionbudgets", tenant.namespace, "keep"))
            .get("status", {})
            .get("disruptionsAllowed")
            == 0
            and client.get(resource_path("policy/v1", "poddisruptionbudgets", tenant.namespace, "keep"))
            .get("status", {})
            .get("currentHealthy")
            == 1
        ),
        60,
        "the PDB counts o2 and allows no disruption",
    )

    # Attack: another tenant's waiting group, short of what "over" holds beyond its minimum,
    # takes nothing from another namespace.
    other = side.tenant()
    other.kubectl.apply([manifest("grab", 2)], namespace=other.namespace)
    wait_phase(client, other.namespace, "grab", "Pending")
    # Attack: a waiting group of the namespace asking more than the surplus (3 cpu) can free
    # evicts nothing: the eviction would not let it in.
    tenant.kubectl.apply([manifest("greedy", 4)], namespace=tenant.namespace)
    wait_phase(client, tenant.namespace, "greedy", "Pending")
    time.sleep(QUIET)
    assert all(present(client, tenant.namespace, n) for n in names)
    assert evictions(client, tenant.namespace) == []
    other.kubectl("delete", "podgroups.scheduling.volcano.sh", "grab", "-n", other.namespace)
    tenant.kubectl("delete", "podgroups.scheduling.volcano.sh", "greedy", "-n", tenant.namespace)

    # The waiting group lacks 2 cpu. Surplus newest first: o3 (opted out: kept, it counts
    # towards the minimum), o2 (its PDB refuses), then o1 and o0.
    tenant.kubectl.apply([manifest("wait", 2, min_member=2)], namespace=tenant.namespace)
    waiting = ["w0", "w1"]
    tenant.kubectl.apply([member(n, "wait") for n in waiting], namespace=tenant.namespace)
    disrupted: dict[str, str] = {}

    def evicted() -> bool:
        disrupted.update(side.disruption(tenant.namespace, names))
        return not present(client, tenant.namespace, "o0") and not present(client, tenant.namespace, "o1")

    wait_for(evicted, 90, "o1 and o0 are evicted", 0.2)
    wait_for(lambda: evicted() and len(disrupted) >= 2, 10, "their DisruptionTarget conditions are read", 0.2)
    # The Eviction API's condition, which kube-apiserver writes only when it evicts.
    assert disrupted == {"o0": "EvictionByEvictionAPI", "o1": "EvictionByEvictionAPI"}, disrupted
    wait_phase(client, tenant.namespace, "wait", "Running", timeout=90)
    side.wait_running(tenant.namespace, waiting, "the waiting group's members run")
    assert present(client, tenant.namespace, "o2"), "the PDB-protected member was evicted"
    assert present(client, tenant.namespace, "o3"), "the opted-out member was evicted"
    assert phase(client, tenant.namespace, "over") == "Running"  # it keeps its minimum

    # Events: on each evicted pod, on both groups, and the PDB's refusal on the waiting group.
    wait_for(lambda: evictions(client, tenant.namespace) == ["o0", "o1"], 30, "an Evicted Event on o0 and o1")
    (on_pod,) = [e for e in events(client, tenant.namespace, "Evicted") if e["regarding"]["name"] == "o1"]
    assert f"for PodGroup {tenant.namespace}/wait" in on_pod["note"], on_pod["note"]
    assert on_pod["reportingController"] == "priogate.io/controller"
    by_group = {
        e["regarding"]["name"]: e["note"] for e in events(client, tenant.namespace, "EvictedOverused")
    }
    assert set(by_group) == {"wait", "over"}, by_group
    assert "o1, o0" in by_group["wait"] and "keeps its minimum" in by_group["over"]
    blocked = events(client, tenant.namespace, "EvictionBlocked")
    assert blocked and "evicting o2" in blocked[0]["note"], blocked
    # Never more than the surplus it lacked: nothing else was evicted meanwhile.
    time.sleep(QUIET)
    assert evictions(client, tenant.namespace) == ["o0", "o1"]


def test_without_the_flag_nothing_is_evicted(admin: ApiClient, tenant: Tenant, default_side: Side):
    client = admin
    fillers_ns = default_side.tenant().namespace
    fill(default_side, fillers_ns, Fraction(1))
    free = int(sum(default_side.free_cpu().values()))
    names = overused_group(default_side, tenant, free, {})
    tenant.kubectl.apply([manifest("wait", 1)], namespace=tenant.namespace)
    wait_phase(client, tenant.namespace, "wait", "Pending")
    time.sleep(QUIET)
    assert all(present(client, tenant.namespace, n) for n in names)
    assert evictions(client, tenant.namespace) == []
    assert phase(client, tenant.namespace, "wait") == "Pending"
