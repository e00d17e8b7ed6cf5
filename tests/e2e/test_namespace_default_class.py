"""A default PriorityClass per namespace (`priogate.io/default-priority-class`,
docs/priorityclass-policy.md) on a real kube-apiserver, in both modes: the built-in Priority
plugin replaced (the test run's cluster) and kept (kube-apiserver restarted with it, priogate
registered with the plugin-kept policy). Every rule is exercised as a tenant (the built-in `edit`
role in one namespace, tests/e2e/tenant.py; with kubectl --as and the client) and as the admin.

What must hold: in an annotated namespace, a pod, a Volcano PodGroup and a native PodGroup that
name no class get the namespace's class, its value and
preemptionPolicy; a named class, the globalDefault's included, is kept; a default class that
does not exist refuses the create with a message naming the class and the annotation; the tenant
cannot change the annotation; a class restricted by `priogate.io/allowed-namespaces` is still
refused where it is not allowed when it comes as the namespace's default; and a pod in a
namespace without the annotation costs no priogate hook call it did not cost before.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster
from localcluster.api import metric_sum
from localcluster.webhooks import WEBHOOK_METRIC
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.namespace_default import ANNOTATION, LABEL
from tests.builders import priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import hook_creates, refusal, unique, wait_for
from tests.e2e.tenant import Tenant
from tests.e2e.test_priorityclass_policy import (
    LABEL as TIER,
)
from tests.e2e.test_priorityclass_policy import (
    PRIORITY_CLASSES,
    TABLE,
    assert_refusal,
    bound_pod,
    creates,
    native_group,
    restricted_class,
    volcano_group,
)
from webhook.policy import WebhookPolicy

KEPT_HOOK = "namespace-default-class.priogate.io"
LABEL_HOOK = "namespace-default-label.priogate.io"


def set_default(core: k8s.CoreV1Api, namespace: str, name: str | None) -> Any:
    """As the admin: annotate (None: unannotate) the namespace; the stored namespace."""
    return core.patch_namespace(namespace, {"metadata": {"annotations": {ANNOTATION: name}}})


def dry_run(admin: ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any] | str:
    """The pod kube-apiserver would store, or the refusal's message."""
    try:
        return admin.create(resource_path("v1", "pods", namespace), body, dry_run=True)
    except ApiError as e:
        return str(e)


def takes_default(admin: ApiClient, namespace: str, name: str) -> None:
    """Until kube-apiserver and priogate both see the namespace's annotation and label (their
    namespace caches lag the write by a watch)."""

    def check() -> bool:
        got = dry_run(admin, namespace, bound_pod("probe"))
        return not isinstance(got, str) and got["spec"].get("priorityClassName") == name

    wait_for(check, 30, f"a class-less pod in {namespace} takes the default {name}")


def test_the_namespace_default_applies_and_a_named_class_is_kept(
    mode, admin: ApiClient, core: k8s.CoreV1Api, tenant: Tenant, classes: ClassTracker
) -> None:
    default, usual, other = classes.name("team-default"), classes.name("usual"), classes.name("other")
    admin.create(PRIORITY_CLASSES, priority_class(default, value=4321, preemption_policy="Never"))
    admin.create(PRIORITY_CLASSES, priority_class(other, value=77))
    admin.create(PRIORITY_CLASSES, priority_class(usual, value=5, default=True))
    try:
        # The label follows the annotation in the same write (the label hook).
        stored = set_default(core, tenant.namespace, default)
        assert stored.metadata.labels.get(LABEL) == "true"
        takes_default(admin, tenant.namespace, default)

        made = creates(tenant)
        got = made["pod"](bound_pod("plain"))
        assert (got.spec.priority_class_name, got.spec.priority, got.spec.preemption_policy) == (
            default,
            4321,
            "Never",
        )
        # Named classes are kept: another class, and the globalDefault named explicitly.
        assert made["pod"](bound_pod("other", priority_class=other)).spec.priority == 77
        named = made["pod"](bound_pod("usual", priority_class=usual))
        assert (named.spec.priority_class_name, named.spec.priority) == (usual, 5)
        # kubectl --as the tenant, client-side apply.
        ok = tenant.kubectl.apply([bound_pod("kubectl")], tenant.namespace, check=False)
        assert ok.returncode == 0, ok.stderr
        fetched = tenant.core.read_namespaced_pod("kubectl", tenant.namespace)
        assert (fetched.spec.priority_class_name, fetched.spec.priority) == (default, 4321)
        # Server-side apply (managedFields of operation Apply): the globalDefault named is kept.
        docs = yaml.safe_dump_all([bound_pod("ssa"), bound_pod("ssa-usual", priority_class=usual)])
        ssa = tenant.kubectl(
            f"--namespace={tenant.namespace}", "apply", "--server-side", "-f", "-", stdin=docs
        )
        assert ssa.returncode == 0, ssa.stderr
        for pod_name, want in (("ssa", (default, 4321)), ("ssa-usual", (usual, 5))):
            fetched = tenant.core.read_namespaced_pod(pod_name, tenant.namespace)
            assert (fetched.spec.priority_class_name, fetched.spec.priority) == want
        # PodGroups, Volcano's and native ones; a native one naming the globalDefault keeps it.
        assert made["volcano"](volcano_group("vpg"))["spec"]["priorityClassName"] == default
        native = made["native"](native_group("npg"))
        assert (native["spec"]["priorityClassName"], native["spec"]["priority"]) == (default, 4321)
        native = made["native"](native_group("npg-usual", priorityClassName=usual))
        assert (native["spec"]["priorityClassName"], native["spec"]["priority"]) == (usual, 5)

        # The tenant cannot change or remove the annotation (`edit` does not write namespaces).
        for patch in ({ANNOTATION: other}, {ANNOTATION: None}):
            with pytest.raises(ApiException) as e:
                tenant.core.patch_namespace(tenant.namespace, {"metadata": {"annotations": patch}})
            assert e.value.status == 403
        result = tenant.kubectl(
            "annotate", "namespace", tenant.namespace, f"{ANNOTATION}={other}", "--overwrite", check=False
        )
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr

        # Removed by the admin: the label goes with it, and the globalDefault is back.
        assert LABEL not in (set_default(core, tenant.namespace, None).metadata.labels or {})
        takes_default(admin, tenant.namespace, usual)
    finally:
        classes.delete(usual)


def test_a_missing_default_class_is_refused_naming_the_annotation(
    mode, admin: ApiClient, core: k8s.CoreV1Api, tenant: Tenant, classes: ClassTracker
) -> None:
    missing = classes.name("not-yet")
    set_default(core, tenant.namespace, missing)
    wanted = f"no PriorityClass with name {missing} was found"

    def refused() -> bool:
        got = dry_run(admin, tenant.namespace, bound_pod("probe"))
        return isinstance(got, str) and wanted in got

    wait_for(refused, 30, "the namespace's missing default refuses a class-less pod")
    bodies = {"pod": bound_pod("p"), "volcano": volcano_group("vpg"), "native": native_group("npg")}
    for kind, body in bodies.items():
        got = refusal(lambda: creates(tenant)[kind](body))  # noqa: B023
        assert got is not None and got[0] == 403, got
        assert wanted in got[1] and ANNOTATION in got[1] and tenant.namespace in got[1], got
    result = tenant.kubectl.apply([bound_pod("kubectl")], tenant.namespace, check=False)
    assert result.returncode != 0 and wanted in result.stderr and ANNOTATION in result.stderr, result.stderr
    # The admin's create too; a named class is not affected.
    named = classes.name("named")
    admin.create(PRIORITY_CLASSES, priority_class(named, value=9))
    wait_for(
        lambda: not isinstance(dry_run(admin, tenant.namespace, bound_pod("n", priority_class=named)), str),
        30,
        "the named class is usable",
    )
    assert (
        core.create_namespaced_pod(tenant.namespace, bound_pod("n", priority_class=named)).spec.priority == 9
    )
    # Once the class exists, the namespace's pods take it.
    admin.create(PRIORITY_CLASSES, priority_class(missing, value=31))
    takes_default(admin, tenant.namespace, missing)
    assert creates(tenant)["pod"](bound_pod("later")).spec.priority == 31


def test_a_restricted_class_as_the_namespace_default_is_refused_where_not_allowed(
    mode, admin: ApiClient, core: k8s.CoreV1Api, tenant: Tenant, classes: ClassTracker
) -> None:
    name = classes.name("restricted-ns-default")
    tier = unique("gold")
    selector = f"{TIER}={tier}"
    admin.create(PRIORITY_CLASSES, restricted_class(name, selector, value=2200))
    set_default(core, tenant.namespace, name)

    def refused() -> bool:
        got = dry_run(admin, tenant.namespace, bound_pod("probe"))
        return isinstance(got, str) and f"PriorityClass {name} may not be used" in got

    wait_for(refused, 30, "the class access policy refuses the namespace default")
    bodies = {"pod": bound_pod("p"), "volcano": volcano_group("vpg"), "native": native_group("npg")}
    for kind, body in bodies.items():
        assert_refusal(refusal(lambda: creates(tenant)[kind](body)), name, tenant.namespace, selector)  # noqa: B023
    result = tenant.kubectl.apply([bound_pod("kubectl")], tenant.namespace, check=False)
    assert result.returncode != 0 and f"PriorityClass {name} may not be used" in result.stderr
    # An admin makes the namespace match: the default is admitted.
    core.patch_namespace(tenant.namespace, {"metadata": {"labels": {TIER: tier}}})
    takes_default(admin, tenant.namespace, name)
    assert creates(tenant)["pod"](bound_pod("ok")).spec.priority == 2200


def test_a_pod_in_a_namespace_without_the_annotation_costs_no_new_hook_call(
    mode,
    admin: ApiClient,
    cluster: LocalCluster,
    core: k8s.CoreV1Api,
    tenant: Tenant,
    classes: ClassTracker,
    namespace: str,
) -> None:
    # Another namespace has a default, so the hooks have something to do: it must not matter here.
    default, plain = classes.name("elsewhere"), classes.name("plain")
    admin.create(PRIORITY_CLASSES, priority_class(default, value=64))
    admin.create(PRIORITY_CLASSES, priority_class(plain, value=65))
    set_default(core, namespace, default)
    takes_default(admin, namespace, default)
    # In the plugin-replaced mode the table resolves both pods in process.
    wait_for(lambda: f"class.{plain}" in (admin.get(TABLE).get("data") or {}), 30, "the table has the class")
    assert cluster.webhooks is not None
    hooks = list(cluster.webhooks.hook_names)
    assert (KEPT_HOOK in hooks) is (mode == "plugin-kept")
    before = {h: hook_creates(admin, h) for h in hooks}
    free = creates(tenant)["pod"](bound_pod("free"))
    assert free.spec.priority is not None and free.spec.priority_class_name != default
    assert creates(tenant)["pod"](bound_pod("named", priority_class=plain)).spec.priority == 65
    assert {h: hook_creates(admin, h) for h in hooks} == before
    # Where the annotation is, the plugin-kept mode routes the pod to the hook.
    assert core.create_namespaced_pod(namespace, bound_pod("routed")).spec.priority == 64
    if mode == "plugin-kept":
        assert hook_creates(admin, KEPT_HOOK) == before[KEPT_HOOK] + 1


def label_hook_updates(admin: ApiClient) -> float:
    return metric_sum(admin.get_text("/metrics"), WEBHOOK_METRIC, {"name": LABEL_HOOK, "operation": "UPDATE"})


def test_the_label_cannot_be_set_or_removed_apart_from_the_annotation(
    mode, admin: ApiClient, core: k8s.CoreV1Api, namespace: str
) -> None:
    # By hand, without the annotation: removed in the same write (it would route pods for nothing).
    got = core.patch_namespace(namespace, {"metadata": {"labels": {LABEL: "true"}}})
    assert LABEL not in (got.metadata.labels or {})
    # Removed by hand while the annotation stays: put back in the same write.
    set_default(core, namespace, "any")
    got = core.patch_namespace(namespace, {"metadata": {"labels": {LABEL: None}}})
    assert got.metadata.labels.get(LABEL) == "true"
    # A write that leaves the two in step (most namespace writes) is not sent to the hook.
    before = label_hook_updates(admin)
    got = core.patch_namespace(namespace, {"metadata": {"labels": {"e2e.priogate.io/other": "x"}}})
    assert got.metadata.labels.get(LABEL) == "true"
    assert label_hook_updates(admin) == before
    # A namespace created with the annotation carries the label from its first write.
    name = unique("e2e-created-annotated")
    try:
        created = core.create_namespace({"metadata": {"name": name, "annotations": {ANNOTATION: "any"}}})
        assert created.metadata.labels.get(LABEL) == "true"
    finally:
        core.delete_namespace(name)


def test_the_controller_puts_the_label_in_step_where_the_hook_did_not_see_the_write(
    mode, admin: ApiClient, cluster: LocalCluster, core: k8s.CoreV1Api, namespace: str
) -> None:
    """Without the label hook in kube-apiserver's path (priogate installed after the annotation,
    or its configuration edited), the controller's backstop puts the label in step."""
    assert cluster.webhooks is not None
    config_path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/priogate"
    config = admin.get(config_path)
    admin.replace(
        config_path, {**config, "webhooks": [h for h in config["webhooks"] if h["name"] != LABEL_HOOK]}
    )
    try:

        def labelled_by_hand() -> bool:
            got = core.patch_namespace(namespace, {"metadata": {"labels": {LABEL: "true"}}})
            return (got.metadata.labels or {}).get(LABEL) == "true"

        wait_for(labelled_by_hand, 30, "kube-apiserver no longer calls the label hook", 0.5)
        wait_for(
            lambda: LABEL not in (core.read_namespace(namespace).metadata.labels or {}),
            30,
            "the controller removes a label without its annotation",
        )
        assert LABEL not in (set_default(core, namespace, "any").metadata.labels or {})
        wait_for(
            lambda: (core.read_namespace(namespace).metadata.labels or {}).get(LABEL) == "true",
            30,
            "the controller labels an annotated namespace",
        )
    finally:
        cluster.webhooks.register(WebhookPolicy.for_mode(priority_plugin=mode == "plugin-kept"))
        cluster.webhooks.probe(priority_plugin=mode == "plugin-kept", proc=cluster.supervisor.get("webhook"))
