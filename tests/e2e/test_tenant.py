"""A namespace user (the built-in `edit` role in one namespace) against priogate: they can use
PodGroups at all (the aggregated ClusterRoles), a negative minResources cannot stretch their
quota, and a PodGroup whose class was deleted can still be updated, deleted and released."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster
from localcluster.binaries import REPO
from priogate.class_users import FORCE_DELETE_ANNOTATION
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, entries_of, ledger_name
from tests.builders import podgroup_body, priority_class
from tests.e2e.helpers import refusal, unique, wait_for
from tests.e2e.tenant import GROUP, VERSION, Tenant, make_tenant, tenant_fixture

CRD = REPO / "manifests" / "crds" / "podgroups.scheduling.volcano.sh.yaml"
HOLD = "example.com/hold"
RESOURCE = f"podgroups.{GROUP}"  # in full: see test_edit_user_manages_podgroups_through_the_aggregated_roles


def settled(check: Callable[[], bool], what: str, streak: int = 6, timeout: float = 60) -> None:
    """Until `check` holds several times in a row: each webhook worker has its own caches."""
    count = 0

    def ok() -> bool:
        nonlocal count
        count = count + 1 if check() else 0
        return count >= streak

    wait_for(ok, timeout, what, 0.05)


@pytest.fixture
def viewer(cluster: LocalCluster, core: k8s.CoreV1Api, rbac: k8s.RbacAuthorizationV1Api) -> Iterator[Tenant]:
    yield from tenant_fixture(cluster, core, rbac, role="view")


# ---- RBAC: PodGroups for namespace users ------------------------------------------------------------


def test_edit_user_manages_podgroups_through_the_aggregated_roles(tenant, rbac, core, cluster):
    # The aggregation controller copied our rules into the built-in roles.
    edit_rules = rbac.read_cluster_role("edit").rules
    assert any(GROUP in (r.api_groups or []) and "podgroups" in (r.resources or []) for r in edit_rules)
    for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
        assert tenant.can(verb, "podgroups", GROUP), verb
    # Status is the controller's, and quotas are the cluster admin's.
    assert not tenant.can("update", "podgroups", GROUP, subresource="status")
    assert not tenant.can("patch", "podgroups", GROUP, subresource="status")
    assert not tenant.can("create", "resourcequotas")

    # kubectl --as the tenant: create, list, annotate, delete. The resource is named in full: the
    # local control plane also serves native PodGroups (scheduling.k8s.io), which kubectl picks
    # for a bare "podgroups" (docs/native-podgroups.md).
    tenant.kubectl.apply([podgroup_body("mine", {"cpu": "1"})], namespace=tenant.namespace)
    listed = tenant.kubectl.json("get", RESOURCE, f"--namespace={tenant.namespace}")
    assert [g["metadata"]["name"] for g in listed["items"]] == ["mine"]
    tenant.kubectl("annotate", RESOURCE, "mine", "team=a", f"--namespace={tenant.namespace}")
    assert tenant.get_podgroup("mine")["metadata"]["annotations"]["team"] == "a"
    tenant.kubectl("delete", RESOURCE, "mine", f"--namespace={tenant.namespace}", "--wait=true")
    assert tenant.podgroup_gone("mine")

    # Bound in one namespace only: nowhere else.
    elsewhere = make_tenant(cluster, core, rbac)  # someone else's namespace
    try:
        got = refusal(
            lambda: tenant.custom.create_namespaced_custom_object(
                GROUP, VERSION, elsewhere.namespace, "podgroups", podgroup_body("intruder")
            )
        )
        assert got is not None and got[0] == 403, got
        assert f'User "{tenant.user}" cannot create resource "podgroups"' in got[1]
    finally:
        core.delete_namespace(elsewhere.namespace)


def test_view_user_reads_podgroups_and_cannot_write_them(viewer, tenant):
    assert viewer.can("list", "podgroups", GROUP) and viewer.can(
        "get", "podgroups", GROUP, subresource="status"
    )
    assert not viewer.can("create", "podgroups", GROUP)
    got = refusal(lambda: viewer.create_podgroup(podgroup_body("nope")))
    assert got is not None and got[0] == 403, got
    out = viewer.kubectl.apply([podgroup_body("nope")], namespace=viewer.namespace, check=False)
    assert out.returncode != 0 and "forbidden" in out.stderr.lower(), out.stderr


# ---- negative quantities --------------------------------------------------------------------------


def quota_for(core: k8s.CoreV1Api, tenant: Tenant, cpu: str) -> None:
    """The cluster admin sets the tenant's quota (the tenant cannot); then wait until every webhook
    worker refuses a group one cpu larger."""
    core.create_namespaced_resource_quota(
        tenant.namespace, {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": cpu}}}
    )
    too_big = str(int(cpu) + 1)
    settled(
        lambda: (
            "exceeded quota"
            in (
                refusal(
                    lambda: tenant.create_podgroup(
                        podgroup_body(unique("probe"), {"cpu": too_big}), dry_run="All"
                    )
                )
                or (0, "")
            )[1]
        ),
        f"the webhook sees the quota cpu={cpu}",
    )


def ledger_groups(core: k8s.CoreV1Api, namespace: str) -> set[str]:
    try:
        cm = core.read_namespaced_config_map(ledger_name(namespace), DEFAULT_LEDGER_NAMESPACE)
    except ApiException as e:
        if e.status == 404:
            return set()
        raise
    return {e.group for e in entries_of(core.api_client.sanitize_for_serialization(cm)).values()}


NEGATIVE = [
    {"cpu": "-100"},
    {"cpu": -100},
    {"cpu": "-100m"},
    {"cpu": "110", "requests.cpu": "-100"},
    {"memory": "-1Gi"},
]


def test_negative_min_resources_are_refused_and_the_quota_still_holds(tenant, core):
    quota_for(core, tenant, "10")
    for i, amounts in enumerate(NEGATIVE):
        got = refusal(lambda: tenant.create_podgroup(podgroup_body(f"neg-{i}", amounts)))  # noqa: B023
        assert got is not None, f"{amounts} was admitted"
        status, message = got
        # The CRD's schema answers first (validating webhooks run after it): 422, naming the field.
        assert status == 422 and "spec.minResources." in message, (amounts, got)
    out = tenant.kubectl.apply(
        [podgroup_body("neg-kubectl", {"cpu": "-100"})], namespace=tenant.namespace, check=False
    )
    assert out.returncode != 0 and "spec.minResources.cpu" in out.stderr, out.stderr
    assert ledger_groups(core, tenant.namespace) == set()

    # A full-size group beside the refused ones is still limited by the quota.
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("huge", {"cpu": "110"})))
    assert got is not None and got[0] == 403, got
    assert "exceeded quota: compute, requested: cpu=110, reserved: cpu=0, limited: cpu=10" in got[1]
    tenant.create_podgroup(podgroup_body("plus", {"cpu": "+4"}))  # a sign Kubernetes allows
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("seven", {"cpu": "7"})))
    assert got is not None and "requested: cpu=7, reserved: cpu=4, limited: cpu=10" in got[1], got
    tenant.create_podgroup(podgroup_body("six", {"cpu": "6"}))
    assert ledger_groups(core, tenant.namespace) == {"plus", "six"}


@pytest.fixture
def volcano_pattern(api_client: k8s.ApiClient) -> Iterator[None]:
    """The PodGroup CRD as Volcano ships it (a sign allowed, no minimum) while the test runs, so
    the webhook, not the schema, is the one to refuse. Restored afterwards."""
    ext = k8s.ApiextensionsV1Api(api_client)
    name = "podgroups.scheduling.volcano.sh"
    ours = yaml.safe_load(CRD.read_text())
    loose = copy.deepcopy(ours)
    prop = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    item = prop["minResources"]["additionalProperties"]
    item["pattern"] = "^(\\+|-)?" + item["pattern"].removeprefix("^\\+?")
    del item["minimum"]

    def put(body: dict[str, Any]) -> None:
        current = ext.read_custom_resource_definition(name)
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        ext.replace_custom_resource_definition(name, body)

    def schema_refuses() -> bool:
        probe = podgroup_body(unique("probe"), {"cpu": "-1"})
        got = refusal(
            lambda: custom.create_namespaced_custom_object(
                GROUP, VERSION, "default", "podgroups", probe, dry_run="All"
            )
        )
        return got is not None and "should match" in got[1]

    custom = k8s.CustomObjectsApi(api_client)
    put(loose)
    try:
        yield
    finally:
        put(ours)
        # Later tests rely on the schema refusing negatives again.
        settled(schema_refuses, "the API server serves the shipped PodGroup schema again")


def test_the_webhook_refuses_negatives_where_the_crd_allows_them(tenant, core, volcano_pattern):
    quota_for(core, tenant, "10")

    def webhook_answers() -> bool:
        got = refusal(
            lambda: tenant.create_podgroup(podgroup_body(unique("probe"), {"cpu": "-1"}), dry_run="All")
        )
        return got is not None and "a negative amount would lower" in got[1]

    settled(webhook_answers, "the API server serves the loose schema and the webhook refuses")
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("neg", {"cpu": "-100"})))
    assert got == (
        422,
        # The namespace's first claim: the enrolment hook refuses it, by the quota hook's rule,
        # before enrolling the namespace.
        'admission webhook "podgroup-enrolment.priogate.io" denied the request: '
        'PodGroup.scheduling.volcano.sh "neg" is invalid: spec.minResources.cpu: Invalid value: "-100": '
        "must be greater than or equal to 0 "
        "(a negative amount would lower the namespace's summed reservations)",
    )
    got = refusal(
        lambda: tenant.create_podgroup(podgroup_body("sneaky", {"cpu": "110", "requests.cpu": "-100"}))
    )
    assert got is not None and 'spec.minResources.requests.cpu: Invalid value: "-100"' in got[1], got
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("huge", {"cpu": "110"})))
    assert got is not None and "exceeded quota" in got[1], got
    tenant.create_podgroup(podgroup_body("fits", {"cpu": "10"}))
    assert ledger_groups(core, tenant.namespace) == {"fits"}


# ---- PodGroup UPDATE keeps the stored class -----------------------------------------------------


def test_a_group_whose_class_was_deleted_can_still_be_updated_deleted_and_released(
    tenant, classes, scheduling, core
):
    cls = classes.name("tenant-class")
    scheduling.create_priority_class(priority_class(cls, value=4321, preemption_policy=None))

    def create_resolves(expected: bool) -> Callable[[], bool]:
        def check() -> bool:
            got = refusal(
                lambda: tenant.create_podgroup(
                    podgroup_body(unique("probe"), priorityClassName=cls), dry_run="All"
                )
            )
            if expected:
                return got is None
            return got is not None and f"no PriorityClass with name {cls} was found" in got[1]

        return check

    settled(create_resolves(True), f"the webhook sees class {cls}")
    held = podgroup_body("held", {"cpu": "1"}, priorityClassName=cls)
    held["metadata"]["finalizers"] = [HOLD]
    tenant.create_podgroup(held)

    # "held" still names the class, so the admin forces the delete (docs/priorityclass-policy.md,
    # "Safe deletes"): what follows is the state that leaves behind.
    scheduling.patch_priority_class(cls, {"metadata": {"annotations": {FORCE_DELETE_ANNOTATION: "true"}}})
    scheduling.delete_priority_class(cls)
    settled(create_resolves(False), f"the webhook sees class {cls} gone")

    # An annotation-only update: the mutating rule used to resolve the class again and refuse it.
    tenant.patch_podgroup("held", {"metadata": {"annotations": {"touched": "yes"}}})
    stored = tenant.get_podgroup("held")
    assert stored["metadata"]["annotations"]["touched"] == "yes"
    assert stored["spec"]["priorityClassName"] == cls

    tenant.delete_podgroup("held")
    stored = tenant.get_podgroup("held")
    assert stored["metadata"].get("deletionTimestamp"), "the finalizer should hold the group"
    assert stored["metadata"]["finalizers"] == [HOLD]

    tenant.patch_podgroup("held", [{"op": "remove", "path": "/metadata/finalizers"}])
    wait_for(lambda: tenant.podgroup_gone("held"), 30, "the released group is gone")

    core.delete_namespace(tenant.namespace)

    def namespace_gone() -> bool:
        try:
            core.read_namespace(tenant.namespace)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_for(namespace_gone, 120, f"namespace {tenant.namespace} is deleted", 0.5)


def test_a_later_global_default_does_not_move_a_classless_group(tenant, classes, scheduling):
    defaults = [c.metadata.name for c in scheduling.list_priority_class().items if c.global_default]
    assert not defaults, f"a globalDefault class is left over from another test: {defaults}"
    tenant.create_podgroup(podgroup_body("classless", {"cpu": "1"}))
    assert "priorityClassName" not in tenant.get_podgroup("classless")["spec"]

    default = classes.name("tenant-default")
    scheduling.create_priority_class(priority_class(default, value=50, default=True, preemption_policy=None))

    def create_defaults() -> bool:
        made = tenant.create_podgroup(podgroup_body(unique("probe")), dry_run="All")
        return made["spec"].get("priorityClassName") == default

    settled(create_defaults, f"the webhook defaults new groups to {default}")
    tenant.patch_podgroup("classless", {"metadata": {"annotations": {"touched": "yes"}}})
    stored = tenant.get_podgroup("classless")
    assert stored["metadata"]["annotations"]["touched"] == "yes"
    assert "priorityClassName" not in stored["spec"]
