"""What a PodGroup claims, attacked as a tenant (the built-in `edit` role, tests/e2e/tenant.py):
every group is judged by the quotas that bind its class and its size, whatever its minResources,
and the names of one resource count once.

- a group naming a critical class with no minResources is refused by a quota scoped to that
  class, in a namespace that never reserved anything; class-less members of such a group, where
  one exists, take no victim (the gang ranks at its members' admitted priority);
- minMember counts as pods in a never-enrolled namespace;
- Volcano's PodGroups (cpu and requests.cpu, pods and count/pods) count once;
- limits.* in minResources are summed against limits.* hards;
- a resource name with control characters is refused, and the refusal shows it escaped.
"""

from __future__ import annotations

from typing import Any

from priogate.kube.client import ApiClient, resource_path
from priogate.preemption_record import ANNOTATION
from tests.builders import pod, podgroup, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.controller_helpers import groups_path, pod_running
from tests.e2e.helpers import refusal, wait_for
from tests.e2e.tenant import Tenant
from tests.e2e.test_controller_preemption import fill_nodes

CRITICAL = ("system-cluster-critical", "system-node-critical")


def quota(admin: ApiClient, namespace: str, name: str, hard: dict[str, str], **spec: Any) -> None:
    """A ResourceQuota, created by the admin (a tenant cannot)."""
    body = {"metadata": {"name": name}, "spec": {"hard": hard, **spec}}
    admin.create(resource_path("v1", "resourcequotas", namespace), body)


def group(name: str, min_member: int = 1, min_resources: dict[str, str] | None = None) -> dict[str, Any]:
    return podgroup(name, namespace=None, min_member=min_member, min_resources=min_resources)


def enrolled(admin: ApiClient, namespace: str) -> bool:
    labels = admin.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {}
    return labels.get("priogate.io/reservations") == "true"


def test_a_critical_group_without_min_resources_is_refused_by_the_class_scoped_quota(
    tenant: Tenant, admin: ApiClient
):
    # The upstream way to forbid the system classes in a namespace: a quota scoped to them,
    # with no pods allowed (the built-in ResourceQuota plugin refuses such pods alike).
    selector = {
        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": list(CRITICAL)}]
    }
    quota(admin, tenant.namespace, "no-critical", {"pods": "0"}, scopeSelector=selector)
    assert not enrolled(admin, tenant.namespace)
    critical = podgroup("borrowed", namespace=None, priority_class="system-cluster-critical")
    got = refusal(lambda: tenant.create_podgroup(critical))
    assert got is not None, (
        "a critical PodGroup with no minResources was admitted under a quota forbidding the class"
    )
    assert "exceeded quota: no-critical" in got[1] and "pods=1" in got[1], got
    # minMember 0 and nothing else claims nothing: no quota can refuse it.
    tenant.create_podgroup(
        podgroup("empty", namespace=None, min_member=0, priority_class="system-cluster-critical")
    )
    # An ordinary group still goes in.
    tenant.create_podgroup(group("plain", 1, {"cpu": "1"}))


def test_min_member_counts_as_pods_in_a_never_enrolled_namespace(tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "four-pods", {"pods": "4"})
    assert not enrolled(admin, tenant.namespace)
    got = refusal(lambda: tenant.create_podgroup(group("six", min_member=6)))
    assert got is not None and "requested: pods=6" in got[1], got
    # Refused, so it holds nothing: the next ordinary group fits.
    tenant.create_podgroup(group("one", 1, {"cpu": "1"}))
    tenant.create_podgroup(group("three", min_member=3))
    got = refusal(lambda: tenant.create_podgroup(group("fifth", min_member=1)))
    assert got is not None and "reserved: pods=4" in got[1], got


def test_volcano_shaped_groups_count_each_resource_once(tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "compute", {"requests.cpu": "10", "requests.memory": "10Gi"})

    def volcano(name: str, cpu: str = "3", requests_cpu: str = "3") -> dict[str, Any]:
        # As Volcano's job controller writes minResources: both names of each resource.
        both = {"cpu": cpu, "requests.cpu": requests_cpu, "memory": "1Gi", "requests.memory": "1Gi"}
        return group(name, 1, {**both, "pods": "1", "count/pods": "1"})

    for i in range(3):
        tenant.create_podgroup(volcano(f"job-{i}"))
    got = refusal(lambda: tenant.create_podgroup(volcano("job-3")))
    assert got is not None, "a fourth 3-cpu group fit under requests.cpu: 10"
    assert "requested: requests.cpu=3, reserved: requests.cpu=9" in got[1], got
    got = refusal(lambda: tenant.create_podgroup(volcano("two-amounts", cpu="1", requests_cpu="2")))
    assert got is not None and got[0] == 422, got
    assert "cpu=1 and requests.cpu=2 name one resource with two amounts" in got[1], got


def test_limits_in_min_resources_are_summed_against_limits_hards(tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "limits", {"limits.cpu": "8"})
    tenant.create_podgroup(group("first", 1, {"limits.cpu": "6", "cpu": "1"}))
    got = refusal(lambda: tenant.create_podgroup(group("second", 1, {"limits.cpu": "6", "cpu": "1"})))
    assert got is not None and "requested: limits.cpu=6, reserved: limits.cpu=6" in got[1], got
    # A group without limits keys counts nothing against them.
    tenant.create_podgroup(group("no-limits", 1, {"cpu": "1"}))


def test_a_resource_name_with_control_characters_is_refused_escaped(tenant: Tenant):
    forged = {"cpu\n\x1b[2J\x1b[H State: Running": "1"}
    body = podgroup("forged", namespace=None, min_member=1, min_resources=forged)
    got = refusal(lambda: tenant.create_podgroup(body))
    assert got is not None and got[0] == 422, got
    assert "not a valid resource name" in got[1] and "\\u001b[2J" in got[1], got
    assert "\x1b" not in got[1] and "\n" not in got[1], got


def test_class_less_members_of_a_critical_group_take_no_victim(
    tenant: Tenant, admin: ApiClient, namespace: str, classes: ClassTracker
):
    """Where a critical group exists all the same (the admin made it), members the tenant
    creates without its class are ranked at their own priority (0): the pods of priority 1000
    that fill the nodes are no victims, and the group says why."""
    busy = classes.name("busy")
    admin.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses", priority_class(busy, value=1000, preemption_policy=None)
    )
    fillers = fill_nodes(admin, namespace, busy)
    wait_for(lambda: all(pod_running(admin, namespace, f) for f in fillers), 90, "the fillers run")
    admin.create(
        groups_path(tenant.namespace),
        podgroup("gang", namespace=None, min_member=2, priority_class="system-cluster-critical"),
    )
    for i in range(2):
        member = pod(f"m{i}", namespace=None, cpu="3", group="gang")
        tenant.core.create_namespaced_pod(tenant.namespace, member)

    def told() -> list[dict[str, Any]]:
        events = admin.get(resource_path("events.k8s.io/v1", "events", tenant.namespace))["items"]
        return [e for e in events if e.get("reason") == "MemberPriority"]

    wait_for(lambda: told(), 60, "the controller's MemberPriority Event on the gang")
    (event,) = told()
    assert "members' admitted priority 0 differs from the PodGroup's class value 2000000000" in event["note"]
    for name in fillers:
        filler = admin.get(resource_path("v1", "pods", namespace, name))
        assert not filler["metadata"].get("deletionTimestamp"), f"{name} was preempted for class-less members"
    stored = admin.get(groups_path(tenant.namespace, "gang"))
    assert ANNOTATION not in (stored["metadata"].get("annotations") or {}), stored["metadata"]
