"""The preemption preview (docs/preemption-preview.md) on a real
kube-apiserver, in both modes: the built-in Priority plugin replaced (the test run's cluster) and
kept (kube-apiserver restarted with it), priogate registered with the preview turned on
(webhook.policy `preemption_preview`). Asked with `kubectl create --dry-run=server`, as the cluster
admin and as a tenant (the built-in `edit` role, `kubectl --as`, tests/e2e/tenant.py).

The kwok nodes are evened out and then filled by the tenant's low-priority pods, two per node,
leaving 200m free on each: a high-priority pod of 100m fits, one larger than a low pod plus the
free room needs both low pods of a node, on whichever node it lands.

What must hold: a dry-run pod that needs preemption prints `Warning: priogate: preview: ...` with
the victims' count, their namespace and highest priority; a dry-run pod that fits prints no
warning; a real create of a pod that fits prints none and is never sent to the preview hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from localcluster import LocalCluster
from priogate.kube.client import ApiClient
from priogate.preemption_preview import PREFIX
from priogate.resources import parse_quantity, pod_requests
from tests.builders import pod, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import Kubectl, hook_creates, wait_for
from tests.e2e.tenant import Tenant
from webhook.policy import WebhookPolicy
from webhook.rules import preemption_preview

HOOK = preemption_preview.RULE_SET.name  # the pods' preview hook
LOW, HIGH = 10, 1000
ROOM = Fraction(200, 1000)  # cpu left free on every node


@pytest.fixture(scope="module", params=["plugin-replaced", "plugin-kept"])
def mode(request: pytest.FixtureRequest, cluster: LocalCluster) -> Iterator[str]:
    """The cluster in one mode with the preview registered; the test run's mode, without the
    preview, again afterwards."""
    assert cluster.webhooks is not None
    hook = cluster.supervisor.get("webhook")
    default_mode = cluster.mode

    def switch(plugin: bool, preview: bool) -> None:
        cluster.webhooks.unregister()
        cluster.webhooks.register(WebhookPolicy.for_mode(priority_plugin=plugin, preemption_preview=preview))
        if plugin != cluster.mode.priority_plugin:
            cluster.restart_apiserver(dataclasses.replace(default_mode, priority_plugin=plugin))
        cluster.webhooks.probe(priority_plugin=plugin, proc=hook)

    switch(request.param == "plugin-kept", True)
    try:
        yield request.param
    finally:
        switch(default_mode.priority_plugin, False)


def millis(cpu: Fraction) -> str:
    return f"{int(cpu * 1000)}m"


def free_cpu(admin: ApiClient) -> dict[str, Fraction]:
    """Allocatable cpu less what bound, unfinished pods request, per node."""
    nodes = admin.get("/api/v1/nodes")["items"]
    free = {n["metadata"]["name"]: parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes}
    for p in admin.get("/api/v1/pods")["items"]:
        node = p["spec"].get("nodeName")
        if node in free and p["status"].get("phase") not in ("Succeeded", "Failed"):
            free[node] -= pod_requests(p).get("cpu", Fraction(0))
    return free


def settle(admin: ApiClient) -> None:
    """Until no pod of an earlier test is leaving the nodes: sizing the new pods before it went
    would leave more room than the scenario means to."""

    def settled() -> bool:
        leaving = {
            n["metadata"]["name"]
            for n in admin.get("/api/v1/namespaces")["items"]
            if (n.get("status") or {}).get("phase") == "Terminating"
        }
        return not [
            p
            for p in admin.get("/api/v1/pods")["items"]
            if p["spec"].get("nodeName")
            and (p["metadata"].get("deletionTimestamp") or p["metadata"]["namespace"] in leaving)
        ]

    wait_for(settled, 90, "no pod of an earlier test is left on the nodes", interval=0.5)


def manifest(name: str, class_name: str, cpu: Fraction, node: str | None = None) -> dict[str, Any]:
    return pod(name, namespace=None, priority_class=class_name, cpu=millis(cpu), node=node, created=None)


def dry_run(kubectl: Kubectl, namespace: str, body: dict[str, Any]) -> str:
    """`kubectl create --dry-run=server -f -`: what it prints on stderr (its warnings)."""
    result = kubectl("-n", namespace, "create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(body))
    return result.stderr


def preview_lines(stderr: str) -> list[str]:
    return [ln.removeprefix("Warning: ") for ln in stderr.splitlines() if PREFIX in ln]


@pytest.fixture
def full(
    mode: str, admin: ApiClient, tenant: Tenant, scheduling: k8s.SchedulingV1Api, classes: ClassTracker
) -> Iterator[tuple[str, str, Fraction]]:
    """(low class, high class, the cpu of one low pod) once every node has the tenant's two low
    pods and ROOM free, and the preview's caches show them."""
    low, high = classes.name("e2e-preview-low"), classes.name("e2e-preview-high")
    scheduling.create_priority_class(priority_class(low, value=LOW))
    scheduling.create_priority_class(priority_class(high, value=HIGH))
    settle(admin)
    free = free_cpu(admin)
    least = min(free.values())
    assert least > ROOM + Fraction(2, 10), f"the nodes are too full for the scenario: {free}"
    half = (least - ROOM) / 2
    core = tenant.core
    for i, (node, cpu) in enumerate(sorted(free.items())):
        if cpu > least:  # evened out by a pod no preemptor here may take (the same priority)
            core.create_namespaced_pod(tenant.namespace, manifest(f"pad-{i}", high, cpu - least, node))
        for j in range(2):
            core.create_namespaced_pod(tenant.namespace, manifest(f"low-{i}-{j}", low, half, node))
    yield low, high, half


def test_a_dry_run_pod_that_needs_preemption_is_warned_as_admin_and_tenant(
    full: tuple[str, str, Fraction], kubectl: Kubectl, tenant: Tenant, admin: ApiClient
):
    _, high, half = full
    ns = tenant.namespace
    expected = f"{PREFIX} placing this pod would preempt 2 pods in namespace {ns} (highest priority {LOW})"
    urgent = manifest("urgent", high, half + ROOM + Fraction(1, 10))
    # The preview's caches follow the pods by their watch: the first answers may predate them.
    wait_for(
        lambda: preview_lines(dry_run(kubectl, ns, urgent)) == [expected],
        timeout=30,
        what="the admin's dry run is warned of its two victims",
        interval=0.5,
    )
    assert preview_lines(dry_run(tenant.kubectl, ns, urgent)) == [expected]
    generated = {**urgent, "metadata": {"generateName": "urgent-"}}
    assert preview_lines(dry_run(tenant.kubectl, ns, generated)) == [expected]
    # Nothing was created, and the victims are all still there.
    names = {p.metadata.name for p in tenant.core.list_namespaced_pod(ns).items}
    assert not [n for n in names if n.startswith("urgent")] and len(names) >= 6


def test_a_pod_that_fits_prints_no_warning_dry_run_or_real(
    full: tuple[str, str, Fraction], kubectl: Kubectl, tenant: Tenant, admin: ApiClient
):
    _, high, half = full
    ns = tenant.namespace
    urgent = manifest("urgent", high, half + ROOM + Fraction(1, 10))
    wait_for(
        lambda: bool(preview_lines(dry_run(kubectl, ns, urgent))),
        timeout=30,
        what="the preview sees the full nodes",
        interval=0.5,
    )
    small = manifest("small", high, ROOM / 2)
    for who in (kubectl, tenant.kubectl):
        before = hook_creates(admin, HOOK)
        stderr = dry_run(who, ns, small)
        assert "Warning" not in stderr, stderr
        assert hook_creates(admin, HOOK) > before  # asked, and it fits
    before = hook_creates(admin, HOOK)
    real = tenant.kubectl("-n", ns, "create", "-f", "-", stdin=yaml.safe_dump(small))
    assert "Warning" not in real.stderr, real.stderr
    assert hook_creates(admin, HOOK) == before  # a real create never reaches the hook
    assert tenant.core.read_namespaced_pod("small", ns).spec.priority == HIGH
