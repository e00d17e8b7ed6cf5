"""Delay Pod Creation through the real control plane, as a tenant (the built-in `edit` role,
`kubectl --as`): a member of a PodGroup that is not Inqueue is created with priogate's scheduling
gate and takes no node, however much is idle for it alone; the tenant cannot lift the gate; the
controller lifts it when the group is admitted, and every member is bound. A gang whose group
is created after its pods, in a namespace that already holds PodGroups, waits for it the same
way."""

from __future__ import annotations

import json
import time
from fractions import Fraction
from typing import Any

from priogate import gate
from priogate.kube.client import ApiClient, resource_path
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from tests.builders import pod, podgroup
from tests.e2e.controller_helpers import phase, wait_phase
from tests.e2e.helpers import wait_for
from tests.e2e.plugin import Run, ok, plugin_runner
from tests.e2e.preemptor_side import Side, millicpu
from tests.e2e.tenant import Tenant

IDLE_PER_NODE = Fraction(1)
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


def manifest(name: str, min_member: int, cpu: int) -> dict[str, Any]:
    group = podgroup(name, namespace=None, min_member=min_member, min_resources={"cpu": str(cpu)})
    group["metadata"] = {"name": name}
    return group


def member(name: str, group: str) -> dict[str, Any]:
    body = pod(name, namespace=None, cpu="1", limits={"cpu": "1"}, group=group)
    body["metadata"] = {"name": name, "annotations": {GROUP_ANNOTATION: group}}
    return body


def get_pod(client: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return client.get(resource_path("v1", "pods", namespace, name))


def scheduling_gated(client: ApiClient, namespace: str, name: str) -> bool:
    """kube-scheduler saw the pod and left it alone for its gates (PodScheduled False,
    SchedulingGated: pkg/scheduler's scheduling queue reports gated pods so)."""
    obj = get_pod(client, namespace, name)
    return gate.has_gate(obj) and any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def admitted(client: ApiClient, namespace: str, name: str) -> None:
    """Inqueue, or already Running: once the gates are lifted the members bind at once."""
    wait_for(
        lambda: phase(client, namespace, name) in ("Inqueue", "Running"),
        60,
        f"PodGroup {namespace}/{name} is admitted",
    )


def bound(client: ApiClient, namespace: str, names: list[str]) -> bool:
    return all(get_pod(client, namespace, n)["spec"].get("nodeName") for n in names)


def test_members_of_a_waiting_group_hold_no_node_until_it_is_inqueue(
    admin: ApiClient, tenant: Tenant, default_side: Side, plugin_path: Any
):
    client = admin
    # The admin's pods fill every kwok node but IDLE_PER_NODE cpu: each member alone would fit.
    default_side.settle()
    fillers_ns = default_side.tenant().namespace
    fillers = []
    for i, (node, free) in enumerate(sorted(default_side.free_cpu().items())):
        filler = pod(
            f"filler-{i}",
            namespace=None,
            cpu=millicpu(free - IDLE_PER_NODE),
            node_selector={"kubernetes.io/hostname": node},
        )
        client.create(resource_path("v1", "pods", fillers_ns), filler)
        fillers.append(filler["metadata"]["name"])
    default_side.wait_running(fillers_ns, fillers, "the fillers run")
    idle = IDLE_PER_NODE * len(fillers)
    size = int(idle) + 1  # one member more than idle cpus: the gang cannot fit

    tenant.kubectl.apply([manifest("gang", size, size)], namespace=tenant.namespace)
    wait_phase(client, tenant.namespace, "gang", "Pending")
    names = [f"m{i}" for i in range(size)]
    tenant.kubectl.apply([member(n, "gang") for n in names], namespace=tenant.namespace)
    wait_for(
        lambda: all(scheduling_gated(client, tenant.namespace, n) for n in names),
        30,
        "kube-scheduler reports every member SchedulingGated",
    )
    # Without the gate kube-scheduler binds a pod within a second: give it a few.
    time.sleep(3)
    held = [get_pod(client, tenant.namespace, n)["spec"].get("nodeName") for n in names]
    assert held == [None] * size, f"members of a Pending group took nodes: {held}"

    # `kubectl priogate why` says what holds the member.
    why: Run = plugin_runner(plugin_path, default_side.cluster.kubeconfig)
    text = ok(why("why", "pod/m0", "-n", tenant.namespace))
    assert f"{gate.GATE} holds it until its PodGroup {tenant.namespace}/gang is Inqueue (now Pending" in text

    # The tenant may update pods, but not lift priogate's gate.
    patch = json.dumps({"spec": {"schedulingGates": [{"$patch": "delete", "name": gate.GATE}]}})
    refused = tenant.kubectl("patch", "pod", "m0", "-n", tenant.namespace, "-p", patch, check=False)
    assert refused.returncode != 0, refused.stdout
    assert f"the scheduling gate {gate.GATE} is lifted only by the priogate controller" in refused.stderr
    assert gate.has_gate(get_pod(client, tenant.namespace, "m0"))

    # Room for the gang: it goes Inqueue, the controller lifts the gates, every member is bound.
    client.delete(resource_path("v1", "pods", fillers_ns, fillers[0]))
    admitted(client, tenant.namespace, "gang")
    wait_for(lambda: bound(client, tenant.namespace, names), 60, "every member is bound")
    assert not any(gate.has_gate(get_pod(client, tenant.namespace, n)) for n in names)


def test_pods_created_before_their_group_wait_for_it(admin: ApiClient, tenant: Tenant, default_side: Side):
    client = admin
    default_side.settle()
    # The gate hook is called only where PodGroups are (docs/controller.md): the namespace's
    # first claiming group enrols it before that group is admitted.
    first = podgroup("first", namespace=None, min_member=1)
    tenant.kubectl.apply([first], namespace=tenant.namespace)
    labels = client.get(f"/api/v1/namespaces/{tenant.namespace}")["metadata"].get("labels") or {}
    assert labels.get(ENROLLED_LABEL) == ENROLLED_VALUE, labels
    names = ["early-0", "early-1"]
    tenant.kubectl.apply([member(n, "late") for n in names], namespace=tenant.namespace)
    wait_for(
        lambda: all(scheduling_gated(client, tenant.namespace, n) for n in names),
        30,
        "the members wait for a group that does not exist yet",
    )
    tenant.kubectl.apply([manifest("late", 2, 2)], namespace=tenant.namespace)
    admitted(client, tenant.namespace, "late")
    wait_for(lambda: bound(client, tenant.namespace, names), 60, "both members are bound")
    # A member created once the group is admitted is never gated (the stored object, as created).
    created = tenant.core.create_namespaced_pod(tenant.namespace, member("later", "late"))
    assert not created.spec.scheduling_gates, created.spec.scheduling_gates
