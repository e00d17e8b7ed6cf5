"""The in-process pod priority policy (webhook/priority_policy.py) on a real kube-apiserver, with
the built-in Priority plugin replaced (the test run's cluster), as a tenant with the built-in
`edit` role in one namespace (tests/e2e/tenant.py).

What it must hold: a pod the policy resolves gets exactly what the plugin would give it, with no
call to the pod priority hook; every pod it cannot settle (a preset value, a class it does not
know, a mark the tenant set) still goes through the hook and gets the plugin's answer or
refusal; and the tenant can neither write the table nor keep the mark. Calls are counted with
kube-apiserver's own apiserver_admission_webhook_request_total.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from localcluster.webhooks import PRIOGATE_NAMESPACE
from priogate import priority
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.priority_table import MARKER_ANNOTATION, TABLE_NAME
from tests.builders import pod, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import hook_creates, wait_for
from tests.e2e.tenant import Tenant

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
POD_PRIORITY = "pod-priority.priogate.io"
TABLE = resource_path("v1", "configmaps", PRIOGATE_NAMESPACE, TABLE_NAME)
NOWHERE = "e2e-nowhere"  # a node that does not exist: nothing schedules or runs these pods


def table(admin: ApiClient) -> dict[str, str]:
    return admin.get(TABLE).get("data") or {}


def resolved_in_process(admin: ApiClient, namespace: str, body: dict[str, Any]) -> bool:
    """kube-apiserver's policy has the table as it is now: a dry run comes back resolved and
    unmarked without a hook call."""
    before = hook_creates(admin, POD_PRIORITY)
    got = admin.create(resource_path("v1", "pods", namespace), body, dry_run=True)
    marked = MARKER_ANNOTATION in (got["metadata"].get("annotations") or {})
    return not marked and "priority" in got["spec"] and hook_creates(admin, POD_PRIORITY) == before


def bound_pod(name: str, **kw: Any) -> dict[str, Any]:
    return pod(name, namespace=None, cpu="10m", node=NOWHERE, **kw)


def create_as(tenant: Tenant, body: dict[str, Any]) -> Any:
    return tenant.core.create_namespaced_pod(tenant.namespace, body)


def refusal(tenant: Tenant, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as e:
        create_as(tenant, body)
    assert e.value.status == 403, e.value.body
    return str(e.value.body)


def known_class(admin: ApiClient, classes: ClassTracker, tenant: Tenant, value: int, **kw: Any) -> str:
    name = classes.name("inproc")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=value, **kw))
    wait_for(
        lambda: resolved_in_process(admin, tenant.namespace, bound_pod("probe", priority_class=name)),
        timeout=30,
        what=f"kube-apiserver resolves class {name} in process (the controller's table has it)",
    )
    return name


def test_a_tenants_pods_of_a_known_class_and_of_none_are_resolved_without_a_hook_call(
    admin, tenant: Tenant, classes: ClassTracker
):
    name = known_class(admin, classes, tenant, 4321, preemption_policy="Never")
    before = hook_creates(admin, POD_PRIORITY)
    named = create_as(tenant, bound_pod("named", priority_class=name))
    plain = create_as(tenant, bound_pod("plain"))
    assert hook_creates(admin, POD_PRIORITY) == before, "a pod the policy resolves was sent to the hook"

    assert (named.spec.priority, named.spec.preemption_policy, named.spec.priority_class_name) == (
        4321,
        "Never",
        name,
    )
    assert not (named.metadata.annotations or {}).get(MARKER_ANNOTATION)
    # What the plugin gives a pod without a class: the globalDefault, else 0.
    default = priority.current_default(admin.list_all(PRIORITY_CLASSES))
    want = priority.resolve(None, {}, default)
    assert (plain.spec.priority, plain.spec.preemption_policy, plain.spec.priority_class_name or "") == (
        want.priority,
        want.preemption_policy,
        want.class_name,
    )


@pytest.mark.parametrize(
    "preset, message",
    [
        (
            {"priority": 5},
            "the integer value of priority (5) must not be provided in pod spec; "
            "priority admission controller computed 700 from the given PriorityClass name",
        ),
        (
            {"preemption_policy": "Never"},
            "the string value of PreemptionPolicy (Never) must not be provided in pod spec; "
            "priority admission controller computed PreemptLowerPriority from the given PriorityClass name",
        ),
    ],
)
def test_a_tenants_preset_value_still_meets_the_plugins_checks(
    admin, tenant: Tenant, classes: ClassTracker, preset, message
):
    name = known_class(admin, classes, tenant, 700)
    before = hook_creates(admin, POD_PRIORITY)
    got = refusal(tenant, bound_pod("preset", priority_class=name, **preset))
    assert message in got
    assert hook_creates(admin, POD_PRIORITY) == before + 1
    # A preset value equal to the class's passes, through the hook.
    ok = create_as(tenant, bound_pod("equal", priority_class=name, priority=700))
    assert ok.spec.priority == 700
    assert hook_creates(admin, POD_PRIORITY) == before + 2


def test_a_class_the_table_lacks_goes_to_the_hook(admin, tenant: Tenant, classes: ClassTracker):
    got = refusal(tenant, bound_pod("missing", priority_class="e2e-no-such-class"))
    assert "no PriorityClass with name e2e-no-such-class was found" in got
    # Created a moment before the pod: the table may not have it yet; the hook reads it.
    for round_ in range(5):
        name = classes.name(f"fresh{round_}")
        admin.create(PRIORITY_CLASSES, priority_class(name, value=100 + round_))
        created = create_as(tenant, bound_pod(f"fresh-{round_}", priority_class=name))
        assert created.spec.priority == 100 + round_


def test_a_deleted_class_is_refused_once_the_table_drops_it(admin, tenant: Tenant, classes: ClassTracker):
    name = known_class(admin, classes, tenant, 900)
    admin.request("DELETE", f"{PRIORITY_CLASSES}/{name}")
    wait_for(lambda: f"class.{name}" not in table(admin), timeout=30, what="the table drops the class")

    def refused() -> bool:
        try:
            admin.create(
                resource_path("v1", "pods", tenant.namespace),
                bound_pod("p", priority_class=name),
                dry_run=True,
            )
        except ApiError as e:
            return f"no PriorityClass with name {name} was found" in str(e)
        return False

    wait_for(refused, timeout=30, what="kube-apiserver's policy reads the table without the class")
    assert f"no PriorityClass with name {name} was found" in refusal(
        tenant, bound_pod("gone", priority_class=name)
    )


def test_a_new_global_default_reaches_class_less_pods_in_process(
    admin, tenant: Tenant, classes: ClassTracker
):
    name = classes.name("inproc-default")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=-3, default=True))
    wait_for(
        lambda: table(admin).get("globalDefault") == name, timeout=30, what="the table names the default"
    )
    wait_for(
        lambda: resolved_in_process(admin, tenant.namespace, bound_pod("probe")),
        timeout=30,
        what="kube-apiserver's policy reads the table with the default",
    )
    before = hook_creates(admin, POD_PRIORITY)
    got = create_as(tenant, bound_pod("defaulted"))
    assert (got.spec.priority_class_name, got.spec.priority) == (name, -3)
    assert hook_creates(admin, POD_PRIORITY) == before


def test_a_tenant_who_sets_the_mark_only_sends_their_pod_to_the_hook(
    admin, tenant: Tenant, classes: ClassTracker
):
    name = known_class(admin, classes, tenant, 55)
    before = hook_creates(admin, POD_PRIORITY)
    got = create_as(tenant, bound_pod("marked", priority_class=name, annotations={MARKER_ANNOTATION: "x"}))
    assert hook_creates(admin, POD_PRIORITY) == before + 1
    assert got.spec.priority == 55
    assert MARKER_ANNOTATION not in (got.metadata.annotations or {})


def test_a_tenant_cannot_write_the_table(admin, tenant: Tenant):
    for verb in ("update", "patch", "delete"):
        with pytest.raises(ApiException) as e:
            if verb == "delete":
                tenant.core.delete_namespaced_config_map(TABLE_NAME, PRIOGATE_NAMESPACE)
            else:
                fn = getattr(
                    tenant.core, f"{'replace' if verb == 'update' else 'patch'}_namespaced_config_map"
                )
                fn(
                    TABLE_NAME,
                    PRIOGATE_NAMESPACE,
                    {"data": {"class.forged": "1000000000 PreemptLowerPriority"}},
                )
        assert e.value.status == 403, verb
    assert "class.forged" not in table(admin)
