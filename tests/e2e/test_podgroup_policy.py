"""The in-process PodGroup defaults policy (webhook/priority_policy.py) on a real kube-apiserver,
as a tenant with the built-in `edit` role in one namespace (tests/e2e/tenant.py).

What it must hold: a group the policy resolves gets exactly what the PodGroup defaults hook would
give it (minMember 1, queue "default", the globalDefault's name for a group without a class), with
no call to the hook; every group it cannot settle (a class its table lacks, a mark the tenant
set) still goes through the hook and gets its answer or refusal, however complete the tenant
made it; and the stored group never keeps the mark. Calls are counted with kube-apiserver's own
apiserver_admission_webhook_request_total.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from localcluster.webhooks import PRIOGATE_NAMESPACE
from priogate import podgroup, priority
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.priority_table import MARKER_ANNOTATION, TABLE_NAME
from tests.builders import podgroup_body, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import hook_creates, wait_for
from tests.e2e.tenant import Tenant
from webhook.priority_policy import PODGROUP_POLICY_NAME

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
DEFAULTS_HOOK = "podgroup-defaults.priogate.io"
TABLE = resource_path("v1", "configmaps", PRIOGATE_NAMESPACE, TABLE_NAME)
# The fields whose absence alone would send a group to the hook.
COMPLETE = {"minMember": 1, "queue": "q"}


# The bodies here carry only the fields each test names (no minMember unless given).
group = partial(podgroup_body, min_member=None)


def resolved_in_process(admin: ApiClient, namespace: str, body: dict[str, Any], class_name: str) -> bool:
    """kube-apiserver's policy has the table as it is now: a dry run comes back with the class
    and unmarked, without a hook call."""
    before = hook_creates(admin, DEFAULTS_HOOK)
    path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace)
    got = admin.create(path, body, dry_run=True)
    marked = MARKER_ANNOTATION in (got["metadata"].get("annotations") or {})
    named = got["spec"].get("priorityClassName", "")
    return not marked and named == class_name and hook_creates(admin, DEFAULTS_HOOK) == before


def known_class(admin: ApiClient, classes: ClassTracker, tenant: Tenant, **kw: Any) -> str:
    name = classes.name("pg-inproc")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=kw.pop("value", 300), **kw))
    wait_for(
        lambda: resolved_in_process(admin, tenant.namespace, group("probe", priorityClassName=name), name),
        timeout=30,
        what=f"kube-apiserver's policy knows class {name} (the controller's table has it)",
    )
    return name


def table_has(admin: ApiClient, class_name: str) -> bool:
    try:
        return f"class.{class_name}" in (admin.get(TABLE).get("data") or {})
    except ApiError as e:
        if e.status == 404:
            return False
        raise


def current_default(admin: ApiClient) -> str:
    default = priority.current_default(admin.list_all(PRIORITY_CLASSES))
    return default["metadata"]["name"] if default is not None else ""


def test_a_tenants_common_groups_get_the_hooks_defaults_without_a_call(
    admin, tenant: Tenant, classes: ClassTracker
):
    name = known_class(admin, classes, tenant)
    before = hook_creates(admin, DEFAULTS_HOOK)
    bare = tenant.create_podgroup(group("bare", minResources={"cpu": "1"}))
    named = tenant.create_podgroup(group("named", priorityClassName=name, minMember=4, queue="q"))
    assert hook_creates(admin, DEFAULTS_HOOK) == before, "a group the policy resolves was sent to the hook"

    default = current_default(admin)
    assert bare["spec"] == {
        "minMember": podgroup.DEFAULT_MIN_MEMBER,
        "queue": podgroup.DEFAULT_QUEUE,
        "minResources": {"cpu": "1"},
        **({"priorityClassName": default} if default else {}),
    }
    assert named["spec"] == {"priorityClassName": name, "minMember": 4, "queue": "q"}
    for got in (bare, named):
        assert MARKER_ANNOTATION not in (got["metadata"].get("annotations") or {})


def test_a_class_the_table_lacks_goes_to_the_hook_however_complete_the_group(
    admin, tenant: Tenant, classes: ClassTracker
):
    before = hook_creates(admin, DEFAULTS_HOOK)
    with pytest.raises(ApiException) as e:
        tenant.create_podgroup(
            group("missing", priorityClassName="e2e-no-such-class", minMember=1, queue="q")
        )
    assert e.value.status == 403 and "no PriorityClass with name e2e-no-such-class was found" in e.value.body
    assert hook_creates(admin, DEFAULTS_HOOK) == before + 1
    # Created a moment before the group: the table may not have it yet; the hook reads it.
    for round_ in range(3):
        name = classes.name(f"pg-fresh{round_}")
        admin.create(PRIORITY_CLASSES, priority_class(name, value=100 + round_))
        created = tenant.create_podgroup(
            group(f"fresh-{round_}", priorityClassName=name, minMember=1, queue="q")
        )
        assert created["spec"]["priorityClassName"] == name
        assert MARKER_ANNOTATION not in (created["metadata"].get("annotations") or {})


def test_a_new_global_default_reaches_class_less_groups_in_process(
    admin, tenant: Tenant, classes: ClassTracker
):
    name = classes.name("pg-inproc-default")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=-3, default=True))
    wait_for(
        lambda: resolved_in_process(admin, tenant.namespace, group("probe"), name),
        timeout=30,
        what="kube-apiserver's policy reads the table with the default",
    )
    before = hook_creates(admin, DEFAULTS_HOOK)
    # Complete but for the class: the policy names the default, as the hook would.
    got = tenant.create_podgroup(group("defaulted", minMember=2, queue="q"))
    assert got["spec"] == {"priorityClassName": name, "minMember": 2, "queue": "q"}
    assert hook_creates(admin, DEFAULTS_HOOK) == before


def test_a_tenant_who_sets_the_mark_only_sends_their_group_to_the_hook(
    admin, tenant: Tenant, classes: ClassTracker
):
    name = known_class(admin, classes, tenant)
    before = hook_creates(admin, DEFAULTS_HOOK)
    got = tenant.create_podgroup(
        group(
            "marked",
            annotations={MARKER_ANNOTATION: "x", "team": "a"},
            priorityClassName=name,
            minMember=1,
            queue="q",
        )
    )
    assert hook_creates(admin, DEFAULTS_HOOK) == before + 1
    assert got["metadata"]["annotations"] == {"team": "a"}
    assert got["spec"]["priorityClassName"] == name


def test_without_its_table_the_policy_refuses_rather_than_let_a_group_skip_the_hook(
    admin, tenant: Tenant, classes: ClassTracker
):
    """An admin deleted the table: a complete group would skip the hook with no policy to check
    its class, so kube-apiserver refuses PodGroup creates (parameterNotFoundAction Deny) until
    the controller writes the table again (here at once, on a class event)."""
    admin.request("DELETE", TABLE)

    def refused_by_the_policy() -> bool:
        # kube-apiserver's parameter informer hears of the delete a moment later; until then the
        # policy still has the table, sends this group to the hook, and the hook refuses it.
        with pytest.raises(ApiException) as e:
            tenant.create_podgroup(group("unchecked", priorityClassName="e2e-no-such-class", **COMPLETE))
        assert e.value.status == 403, e.value.body
        return PODGROUP_POLICY_NAME in e.value.body and "no params found" in e.value.body

    try:
        wait_for(refused_by_the_policy, timeout=30, what="the policy refuses PodGroups without its table")
    finally:
        # A class event: the controller writes the table again.
        name = classes.name("pg-after-table")
        admin.create(PRIORITY_CLASSES, priority_class(name, value=301))
        wait_for(lambda: table_has(admin, name), timeout=30, what="the controller writes the table again")
    wait_for(
        lambda: resolved_in_process(admin, tenant.namespace, group("probe", priorityClassName=name), name),
        timeout=30,
        what="kube-apiserver's policy reads the table again",
    )
    got = tenant.create_podgroup(group("checked", priorityClassName=name, **COMPLETE))
    assert got["spec"]["priorityClassName"] == name
