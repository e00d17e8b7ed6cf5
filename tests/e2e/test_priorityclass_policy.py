"""Who may use a PriorityClass (`priogate.io/allowed-namespaces`, docs/priorityclass-policy.md) on
a real kube-apiserver, in both modes: the built-in Priority plugin replaced (the test run's
cluster) and kept (kube-apiserver restarted with it, priogate registered with the plugin-kept
policy, as tests/e2e/test_differential.py does). Every rule is attacked as a tenant (the built-in
`edit` role in one namespace, tests/e2e/tenant.py; with kubectl --as and the client) and as the
cluster admin.

What must hold: in a namespace the selector does not match, a pod, a Volcano PodGroup and a
native PodGroup of the class are refused, whether they name it or get it as the globalDefault,
with a message naming the class, the namespace and the selector; once an admin labels the
namespace to match, they are admitted; the tenant cannot label their namespace themselves; an
invalid selector is refused at the class's write; and a pod of a class without the annotation
costs no priogate hook call it did not cost before.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster
from localcluster.webhooks import PRIOGATE_NAMESPACE
from priogate.class_users import FORCE_DELETE_ANNOTATION
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.priority_table import ALLOWED_NAMESPACES_ANNOTATION, CLASS_ACCESS_NAME, TABLE_NAME
from tests.builders import pod, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import api_error, hook_creates, refusal, unique, wait_for
from tests.e2e.tenant import GROUP as VOLCANO_GROUP
from tests.e2e.tenant import VERSION as VOLCANO_VERSION
from tests.e2e.tenant import Tenant

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
TABLE = resource_path("v1", "configmaps", PRIOGATE_NAMESPACE, TABLE_NAME)
PARAMETER = resource_path("v1", "configmaps", PRIOGATE_NAMESPACE, CLASS_ACCESS_NAME)
NATIVE_GROUP, NATIVE_VERSION = "scheduling.k8s.io", "v1alpha2"
NOWHERE = "e2e-nowhere"  # a node that does not exist: nothing schedules or runs these pods
LABEL = "e2e.priogate.io/tier"


def bound_pod(name: str, **kw: Any) -> dict[str, Any]:
    return pod(name, namespace=None, cpu="10m", node=NOWHERE, **kw)


def volcano_group(name: str, **spec: Any) -> dict[str, Any]:
    # minMember 0 and no minResources: it claims nothing, so it enrols no namespace.
    return {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 0, **spec},
    }


def native_group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{NATIVE_GROUP}/{NATIVE_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def restricted_class(name: str, selector: str, value: int, **kw: Any) -> dict[str, Any]:
    pc = priority_class(name, value=value, **kw)
    pc["metadata"]["annotations"] = {ALLOWED_NAMESPACES_ANNOTATION: selector}
    return pc


def creates(tenant: Tenant) -> dict[str, Any]:
    """As the tenant, with the client: a pod, a Volcano PodGroup, a native PodGroup."""
    ns = tenant.namespace
    return {
        "pod": lambda body: tenant.core.create_namespaced_pod(ns, body),
        "volcano": lambda body: tenant.custom.create_namespaced_custom_object(
            VOLCANO_GROUP, VOLCANO_VERSION, ns, "podgroups", body
        ),
        "native": lambda body: tenant.custom.create_namespaced_custom_object(
            NATIVE_GROUP, NATIVE_VERSION, ns, "podgroups", body
        ),
    }


def bodies(suffix: str, **class_field: Any) -> dict[str, dict[str, Any]]:
    pc = {"priority_class": class_field["priorityClassName"]} if class_field else {}
    return {
        "pod": bound_pod(f"pod-{suffix}", **pc),
        "volcano": volcano_group(f"vpg-{suffix}", **class_field),
        "native": native_group(f"npg-{suffix}", **class_field),
    }


def refused_dry_run(admin: ApiClient, namespace: str, body: dict[str, Any], fragment: str) -> bool:
    try:
        admin.create(resource_path("v1", "pods", namespace), body, dry_run=True)
    except ApiError as e:
        return fragment in str(e)
    return False


def enforced(admin: ApiClient, name: str, namespace: str, body: dict[str, Any]) -> None:
    """Until the policy's parameter (the controller writes it) holds the class's selector and
    kube-apiserver's policy refuses a dry run of `body` in `namespace` with it (both lag a write
    by a watch)."""
    wait_for(lambda: f"allowed.{name}" in parameter(admin), 30, "the policy's parameter has the selector")
    wait_for(
        lambda: refused_dry_run(admin, namespace, body, f"PriorityClass {name} may not be used"),
        30,
        f"kube-apiserver's policy refuses class {name} in {namespace}",
    )


def parameter(admin: ApiClient) -> dict[str, str]:
    try:
        return admin.get(PARAMETER).get("data") or {}
    except ApiError as e:
        if e.status == 404:
            return {}
        raise


def parameter_exists(admin: ApiClient) -> bool:
    try:
        admin.get(PARAMETER)
    except ApiError as e:
        if e.status == 404:
            return False
        raise
    return True


def assert_refusal(got: tuple[int, str] | None, name: str, namespace: str, selector: str) -> None:
    assert got is not None, "admitted"
    status, message = got
    assert status == 403, got
    assert f"PriorityClass {name} may not be used in namespace {namespace}" in message, message
    assert f'{ALLOWED_NAMESPACES_ANNOTATION} to namespaces matching "{selector}"' in message, message


def label_namespace(core: k8s.CoreV1Api, namespace: str, value: str | None) -> None:
    core.patch_namespace(namespace, {"metadata": {"labels": {LABEL: value}}})


def admitted_dry_run(admin: ApiClient, namespace: str, body: dict[str, Any]) -> bool:
    try:
        admin.create(resource_path("v1", "pods", namespace), body, dry_run=True)
    except ApiError:
        return False
    return True


def test_a_tenant_in_an_unmatched_namespace_is_refused_a_restricted_class_by_name(
    mode, admin: ApiClient, core: k8s.CoreV1Api, tenant: Tenant, classes: ClassTracker, namespace: str
) -> None:
    name = classes.name("restricted")
    tier = unique("gold")
    selector = f"{LABEL}={tier}"
    admin.create(PRIORITY_CLASSES, restricted_class(name, selector, value=4100))
    enforced(admin, name, tenant.namespace, bound_pod("probe", priority_class=name))

    # The client, for each kind of object.
    for kind, create in creates(tenant).items():
        got = refusal(lambda: create(bodies("named", priorityClassName=name)[kind]))  # noqa: B023
        assert_refusal(got, name, tenant.namespace, selector)
    # kubectl --as the tenant.
    result = tenant.kubectl.apply([bound_pod("kubectl", priority_class=name)], tenant.namespace, check=False)
    assert result.returncode != 0
    assert f"PriorityClass {name} may not be used in namespace {tenant.namespace}" in result.stderr
    # The tenant cannot make their namespace match: `edit` does not write namespaces.
    with pytest.raises(ApiException) as e:
        tenant.core.patch_namespace(tenant.namespace, {"metadata": {"labels": {LABEL: tier}}})
    assert e.value.status == 403
    # Nor switch a PodGroup they already have to the class: a Volcano PodGroup's class may change.
    tenant.create_podgroup(volcano_group("vpg-switch"))
    got = refusal(lambda: tenant.patch_podgroup("vpg-switch", {"spec": {"priorityClassName": name}}))
    assert_refusal(got, name, tenant.namespace, selector)
    assert tenant.get_podgroup("vpg-switch")["spec"].get("priorityClassName") != name
    # The rule is the admin's too, in a namespace that does not match.
    got = refusal(lambda: core.create_namespaced_pod(namespace, bound_pod("admin", priority_class=name)))
    assert_refusal(got, name, namespace, selector)

    # An admin labels the tenant's namespace to match: the same objects are admitted, with the
    # class's priority.
    label_namespace(core, tenant.namespace, tier)
    wait_for(
        lambda: admitted_dry_run(admin, tenant.namespace, bound_pod("probe", priority_class=name)),
        30,
        "kube-apiserver sees the namespace's label",
    )
    made = {
        kind: create(bodies("ok", priorityClassName=name)[kind]) for kind, create in creates(tenant).items()
    }
    assert made["pod"].spec.priority == 4100
    assert made["volcano"]["spec"]["priorityClassName"] == name
    assert made["native"]["spec"]["priority"] == 4100
    ok = tenant.kubectl.apply([bound_pod("kubectl-ok", priority_class=name)], tenant.namespace, check=False)
    assert ok.returncode == 0, ok.stderr
    assert (
        tenant.patch_podgroup("vpg-switch", {"spec": {"priorityClassName": name}})["spec"][
            "priorityClassName"
        ]
        == name
    )


def test_a_restricted_global_default_is_refused_to_class_less_objects_outside_its_namespaces(
    mode, admin: ApiClient, core: k8s.CoreV1Api, tenant: Tenant, classes: ClassTracker
) -> None:
    name = classes.name("restricted-default")
    teams = (unique("ml"), unique("infra"))
    selector = f"{LABEL} in ({teams[0]},{teams[1]})"
    admin.create(PRIORITY_CLASSES, restricted_class(name, selector, value=-7, default=True))
    try:
        enforced(admin, name, tenant.namespace, bound_pod("probe"))
        for kind, create in creates(tenant).items():
            got = refusal(lambda: create(bodies("default")[kind]))  # noqa: B023
            assert_refusal(got, name, tenant.namespace, selector)
        result = tenant.kubectl.apply([bound_pod("kubectl")], tenant.namespace, check=False)
        assert result.returncode != 0 and f"PriorityClass {name} may not be used" in result.stderr
        # A class without the annotation, named, is still the tenant's to use.
        plain = classes.name("plain")
        admin.create(PRIORITY_CLASSES, priority_class(plain, value=12))
        wait_for(
            lambda: admitted_dry_run(admin, tenant.namespace, bound_pod("probe", priority_class=plain)),
            30,
            "the plain class is usable",
        )
        assert creates(tenant)["pod"](bound_pod("plain", priority_class=plain)).spec.priority == 12

        # The set-based selector: the second team's label matches.
        label_namespace(core, tenant.namespace, teams[1])
        wait_for(
            lambda: admitted_dry_run(admin, tenant.namespace, bound_pod("probe")),
            30,
            "kube-apiserver sees the namespace's label",
        )
        got = creates(tenant)["pod"](bound_pod("defaulted"))
        assert (got.spec.priority_class_name, got.spec.priority) == (name, -7)
        assert creates(tenant)["native"](native_group("npg-defaulted"))["spec"]["priority"] == -7
        assert creates(tenant)["volcano"](volcano_group("vpg-defaulted"))["spec"]["priorityClassName"] == name
    finally:
        # Not left as the cluster's globalDefault for the next test, whatever happened; forced,
        # since the tenant's PodGroups still name it (docs/priorityclass-deletes.md).
        admin.request(
            "PATCH",
            f"{PRIORITY_CLASSES}/{name}",
            body={"metadata": {"annotations": {FORCE_DELETE_ANNOTATION: "true"}}},
            content_type="application/merge-patch+json",
        )
        admin.request("DELETE", f"{PRIORITY_CLASSES}/{name}")


@pytest.mark.parametrize(
    "selector, problem",
    [("tier in (gold", "not closed"), ("tier>3", "not supported"), ("-tier=gold", "not a valid label key")],
)
def test_an_invalid_selector_is_refused_when_the_class_is_written(
    mode, admin: ApiClient, kubectl, tenant: Tenant, classes: ClassTracker, selector: str, problem: str
) -> None:
    name = classes.name("badselector")
    with pytest.raises(ApiError) as e:
        admin.create(PRIORITY_CLASSES, restricted_class(name, selector, value=5))
    assert e.value.status == 422, e.value
    assert f"metadata.annotations[{ALLOWED_NAMESPACES_ANNOTATION}]: Invalid value" in str(e.value)
    assert problem in str(e.value)
    # On an update too, with kubectl.
    admin.create(PRIORITY_CLASSES, priority_class(name, value=5))
    result = kubectl(
        "annotate", "priorityclass", name, f"{ALLOWED_NAMESPACES_ANNOTATION}={selector}", check=False
    )
    assert result.returncode != 0 and problem in result.stderr, result.stderr
    # A tenant cannot write classes at all (`edit` has no PriorityClass verbs).
    result = tenant.kubectl(
        "annotate", "priorityclass", name, f"{ALLOWED_NAMESPACES_ANNOTATION}=", check=False
    )
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr


def test_a_pod_of_a_class_without_the_annotation_costs_no_new_hook_call(
    mode, admin: ApiClient, cluster: LocalCluster, tenant: Tenant, classes: ClassTracker
) -> None:
    # A restricted class exists, so the policy has something to check: it must not matter here.
    other = classes.name("elsewhere")
    admin.create(PRIORITY_CLASSES, restricted_class(other, f"{LABEL}=nowhere", value=3))
    plain = classes.name("free")
    admin.create(PRIORITY_CLASSES, priority_class(plain, value=321))
    enforced(admin, other, tenant.namespace, bound_pod("probe", priority_class=other))
    # The table has the plain class: in the plugin-replaced mode its pods resolve in process.
    wait_for(lambda: f"class.{plain}" in (admin.get(TABLE).get("data") or {}), 30, "the table has the class")
    assert cluster.webhooks is not None
    hooks = list(cluster.webhooks.hook_names)
    assert ("pod-priority.priogate.io" in hooks) is (mode == "plugin-replaced")
    before = {h: hook_creates(admin, h) for h in hooks}
    got = creates(tenant)["pod"](bound_pod("free", priority_class=plain))
    assert got.spec.priority == 321
    assert {h: hook_creates(admin, h) for h in hooks} == before


def test_a_namespace_an_admin_marks_later_loses_the_class(
    mode, admin: ApiClient, core: k8s.CoreV1Api, tenant: Tenant, classes: ClassTracker
) -> None:
    """A DoesNotExist selector: the tenant's namespace matches until an admin marks it."""
    name = classes.name("shown")
    selector = "!e2e.priogate.io/untrusted"
    admin.create(PRIORITY_CLASSES, restricted_class(name, selector, value=1))
    wait_for(lambda: f"allowed.{name}" in parameter(admin), 30, "the policy's parameter has the selector")
    assert creates(tenant)["pod"](bound_pod("before", priority_class=name)).spec.priority == 1
    core.patch_namespace(tenant.namespace, {"metadata": {"labels": {"e2e.priogate.io/untrusted": ""}}})
    enforced(admin, name, tenant.namespace, bound_pod("probe", priority_class=name))
    result = tenant.kubectl.apply([bound_pod("after", priority_class=name)], tenant.namespace, check=False)
    assert result.returncode != 0
    assert "Forbidden" in result.stderr or "forbidden" in result.stderr
    assert f'matching "{selector}"' in result.stderr, result.stderr
    with pytest.raises(ApiException) as e:
        creates(tenant)["pod"](bound_pod("after2", priority_class=name))
    assert api_error(e.value)[0] == 403


def test_the_policys_parameter_exists_only_while_a_class_is_restricted(
    mode, admin: ApiClient, classes: ClassTracker
) -> None:
    """Without it kube-apiserver skips the policy before evaluating it: a cluster with no
    restricted class pays nothing for the rule (docs/priorityclass-policy.md)."""
    wait_for(lambda: not parameter_exists(admin), 30, "no parameter while no class is restricted")
    name = classes.name("transient")
    admin.create(PRIORITY_CLASSES, restricted_class(name, f"{LABEL}=x", value=2))
    wait_for(lambda: parameter(admin).get(f"selector.{name}") == f"{LABEL}=x", 30, "the parameter is written")
    admin.request("DELETE", f"{PRIORITY_CLASSES}/{name}")
    wait_for(
        lambda: not parameter_exists(admin), 30, "the parameter is deleted with the last restricted class"
    )
