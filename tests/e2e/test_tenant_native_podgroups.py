"""A namespace user (the built-in `edit` role in one namespace) creating native PodGroups
(scheduling.k8s.io/v1alpha2) with kube-apiserver's Priority plugin replaced (the test run's mode):
priogate resolves their priority exactly as for the admin, and refuses what the plugin refuses,
whatever the tenant writes (docs/native-podgroups.md).

kube-apiserver's bootstrap policy grants the alpha API to `edit` (v1.36: podgroups and workloads
in scheduling.k8s.io), so every namespace user can create native PodGroups: the test checks that
first, since the rest means something only then."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.builders import priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import refusal
from tests.e2e.tenant import Tenant

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1alpha2", "podgroups"


def native(name: str, **spec: object) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def test_a_tenants_native_podgroup_gets_its_priority_from_priogate(
    tenant: Tenant, classes: ClassTracker, scheduling: k8s.SchedulingV1Api
) -> None:
    assert tenant.can("create", PLURAL, GROUP)
    assert not tenant.can("update", PLURAL, GROUP, subresource="status")
    name = classes.name("tenant-native")
    scheduling.create_priority_class(priority_class(name, value=4242))

    # Through kubectl --as the tenant, like the pods' tenant tests.
    tenant.kubectl.apply([native("named", priorityClassName=name)], namespace=tenant.namespace)
    stored = tenant.kubectl.json("get", f"{PLURAL}.{GROUP}", "named", f"--namespace={tenant.namespace}")
    assert stored["spec"]["priority"] == 4242
    assert stored["spec"]["priorityClassName"] == name

    create = tenant.custom.create_namespaced_custom_object

    # A class that does not exist: upstream's wording, from priogate (the plugin is off).
    ghost = native("ghost", priorityClassName="no-such")
    got = refusal(lambda: create(GROUP, VERSION, tenant.namespace, PLURAL, ghost))
    assert got is not None and got[0] == 403, got
    assert "no PriorityClass with name no-such was found" in got[1]

    # A preset value that is not the class's: the tenant cannot pick their own priority.
    forged = native("forged", priorityClassName=name, priority=2_000_000)
    got = refusal(lambda: create(GROUP, VERSION, tenant.namespace, PLURAL, forged))
    assert got is not None and got[0] == 403, got
    assert "priority set in the pod group (2000000) must match the priority computed (4242)" in got[1], got[1]

    # A system class resolves (no namespace rule for PodGroups upstream), and the API server's own
    # validation then refuses a value above 1000000000: no tenant group runs at system priority.
    system = native("system", priorityClassName="system-cluster-critical")
    got = refusal(lambda: create(GROUP, VERSION, tenant.namespace, PLURAL, system))
    assert got is not None and got[0] == 422, got
    assert "must be less than or equal to 1000000000" in got[1], got[1]
