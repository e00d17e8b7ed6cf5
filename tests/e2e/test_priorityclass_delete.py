"""Safe PriorityClass deletes and the globalDefault warning (docs/priorityclass-policy.md, "Safe
deletes") on a real kube-apiserver, in both modes: the built-in Priority plugin replaced (the test
run's cluster) and kept (kube-apiserver restarted with it, priogate registered with the
plugin-kept policy, as tests/e2e/test_priorityclass_policy.py does).

What must hold: the admin's `kubectl delete priorityclass` of a class that a live Deployment (a
tenant's too), a Volcano PodGroup or a native PodGroup names is refused, with a message naming up
to five of them and their count, until they are gone or the class is annotated
`priogate.io/force-delete: "true"`; a tenant with `edit` can neither delete nor annotate a class;
and making a class the globalDefault prints kubectl's `Warning:` line with how many namespaces'
class-less pods it changes, less those with a default of their own.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml

from priogate.class_users import FORCE_DELETE_ANNOTATION, NAMESPACE_DEFAULT_ANNOTATION
from priogate.kube.client import ApiClient, ApiError, resource_path
from tests.builders import priority_class, workload
from tests.e2e.conftest import ClassTracker
from tests.e2e.helpers import Kubectl, wait_for
from tests.e2e.tenant import GROUP as VOLCANO_GROUP
from tests.e2e.tenant import VERSION as VOLCANO_VERSION
from tests.e2e.tenant import Tenant

PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
NATIVE = "scheduling.k8s.io/v1alpha2"
HOOK = 'admission webhook "priorityclasses.priogate.io" denied the request'


def delete_class(kubectl: Kubectl, name: str) -> subprocess.CompletedProcess[str]:
    return kubectl("delete", "priorityclass", name, check=False)


def admitted_dry_run(admin: ApiClient, path: str, body: dict[str, Any]) -> bool:
    try:
        admin.create(path, body, dry_run=True)
    except ApiError:
        return False
    return True


def class_exists(admin: ApiClient, name: str) -> bool:
    return any(pc["metadata"]["name"] == name for pc in admin.list_all(PRIORITY_CLASSES))


def refused_in_use(result: subprocess.CompletedProcess[str], name: str, count: int) -> str:
    """The refusal's text, after checking it is the in-use refusal of `name` for `count` objects."""
    assert result.returncode != 0, result.stdout
    noun = "object" if count == 1 else "objects"
    assert HOOK in result.stderr, result.stderr
    refusal = (
        f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: it is still named by {count} live {noun}: '
    )
    assert refusal in result.stderr, result.stderr
    assert f'annotate the class {FORCE_DELETE_ANNOTATION}="true" to delete it anyway' in result.stderr
    return result.stderr


def test_a_class_a_tenants_deployment_names_is_deleted_only_once_the_deployment_is_gone(
    mode, admin: ApiClient, kubectl: Kubectl, tenant: Tenant, classes: ClassTracker
) -> None:
    name = classes.name("in-use")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=4200))
    # The tenant's own Deployment (no replicas: its template is what matters, and the Deployment
    # controller still makes a ReplicaSet of it, which the refusal does not name twice).
    tenant.kubectl.apply(
        [workload("Deployment", "web", namespace=None, priority_class=name)], tenant.namespace
    )

    message = refused_in_use(delete_class(kubectl, name), name, 1)
    assert f'Deployment "{tenant.namespace}/web"' in message
    assert "ReplicaSet" not in message
    assert class_exists(admin, name)

    # The tenant can neither delete the class nor force it (`edit` has no PriorityClass verbs).
    assert not tenant.can("delete", "priorityclasses", "scheduling.k8s.io")
    assert not tenant.can("patch", "priorityclasses", "scheduling.k8s.io")
    for args in (
        ("delete", "priorityclass", name),
        ("annotate", "priorityclass", name, f"{FORCE_DELETE_ANNOTATION}=true"),
    ):
        result = tenant.kubectl(*args, check=False)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
        assert 'resource "priorityclasses" in API group "scheduling.k8s.io"' in result.stderr, result.stderr
        assert HOOK not in result.stderr  # RBAC refused it; no webhook was asked
    assert class_exists(admin, name)

    # Once the Deployment is gone (and the garbage collector has taken its ReplicaSet, which
    # names the class until then), the class can be deleted.
    tenant.kubectl("delete", "deployment", "web", f"--namespace={tenant.namespace}")
    wait_for(lambda: delete_class(kubectl, name).returncode == 0, 60, f"class {name} can be deleted", 1.0)
    assert not class_exists(admin, name)


def test_the_refusal_names_five_counts_all_and_yields_to_the_force_annotation(
    mode, admin: ApiClient, kubectl: Kubectl, namespace: str, classes: ClassTracker
) -> None:
    name = classes.name("many")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=4300))
    path = resource_path("apps/v1", "deployments", namespace)
    for i in range(6):
        admin.create(path, workload("Deployment", f"d{i}", namespace=None, priority_class=name))
    admin.create(
        resource_path("batch/v1", "cronjobs", namespace),
        workload("CronJob", "nightly", namespace=None, priority_class=name),
    )
    message = refused_in_use(delete_class(kubectl, name), name, 7)
    assert len(re.findall(rf'(?:Deployment|CronJob) "{namespace}/', message)) == 5, message
    assert " and 2 more;" in message
    assert f'CronJob "{namespace}/nightly"' in message  # sorted by kind, namespace and name

    # A dry run asks the same question and deletes nothing.
    assert kubectl("delete", "priorityclass", name, "--dry-run=server", check=False).returncode != 0

    # The admin forces it: the delete goes through, with a warning that nothing was checked.
    kubectl("annotate", "priorityclass", name, f"{FORCE_DELETE_ANNOTATION}=true")
    result = delete_class(kubectl, name)
    assert result.returncode == 0, result.stderr
    assert f"Warning: {FORCE_DELETE_ANNOTATION}: deleted without checking" in result.stderr
    assert not class_exists(admin, name)


def test_a_podgroup_naming_the_class_blocks_its_delete(
    mode, admin: ApiClient, kubectl: Kubectl, tenant: Tenant, classes: ClassTracker
) -> None:
    name = classes.name("grouped")
    admin.create(PRIORITY_CLASSES, priority_class(name, value=4400))
    # Admission resolves a PodGroup's class from a cache: wait until it has this one.
    for group_version, body in (
        (f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", volcano_group("probe", name)),
        (NATIVE, native_group("probe", name)),
    ):
        path = resource_path(group_version, "podgroups", tenant.namespace)
        wait_for(lambda: admitted_dry_run(admin, path, body), 30, f"admission sees class {name}")  # noqa: B023
    # As the tenant: a Volcano PodGroup (minMember 0 claims nothing), then a native one.
    tenant.create_podgroup(volcano_group("vpg", name))
    message = refused_in_use(delete_class(kubectl, name), name, 1)
    assert f'PodGroup.scheduling.volcano.sh "{tenant.namespace}/vpg"' in message
    tenant.delete_podgroup("vpg")
    wait_for(lambda: tenant.podgroup_gone("vpg"), 30, "the Volcano PodGroup is gone")

    tenant.custom.create_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", tenant.namespace, "podgroups", native_group("npg", name)
    )
    message = refused_in_use(delete_class(kubectl, name), name, 1)
    assert f'PodGroup.scheduling.k8s.io "{tenant.namespace}/npg"' in message
    # Deleting it sets its deletionTimestamp at once (the podgroup-protection finalizer may hold
    # it a while): from then on it names the class for nothing.
    tenant.custom.delete_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", tenant.namespace, "podgroups", "npg"
    )
    wait_for(lambda: delete_class(kubectl, name).returncode == 0, 30, f"class {name} can be deleted", 1.0)


def volcano_group(name: str, class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 0, "priorityClassName": class_name},
    }


def native_group(name: str, class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": NATIVE,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "priorityClassName": class_name},
    }


def live_namespaces(admin: ApiClient) -> int:
    return sum(
        1 for ns in admin.list_all("/api/v1/namespaces") if not ns["metadata"].get("deletionTimestamp")
    )


def test_a_new_global_default_warns_how_many_namespaces_it_changes(
    mode, admin: ApiClient, kubectl: Kubectl, namespace: str, classes: ClassTracker
) -> None:
    own = classes.name("own-default")
    admin.create(PRIORITY_CLASSES, priority_class(own, value=10))
    # This namespace names a default of its own: a new globalDefault does not change its pods.
    kubectl("annotate", "namespace", namespace, f"{NAMESPACE_DEFAULT_ANNOTATION}={own}")

    name = classes.name("new-default")
    before = live_namespaces(admin)
    manifest = yaml.safe_dump(priority_class(name, value=77, default=True))
    result = kubectl("create", "-f", "-", stdin=manifest, check=False)
    after = live_namespaces(admin)
    assert result.returncode == 0, result.stderr
    found = re.search(
        r"Warning: pods created without a priorityClassName in (\d+) namespaces?"
        rf" \(not in (\d+) more with their own {re.escape(NAMESPACE_DEFAULT_ANNOTATION)}\)"
        " will now get priority 77 from this class",
        result.stderr,
    )
    assert found, result.stderr
    changed, kept = int(found[1]), int(found[2])
    assert kept >= 1
    assert min(before, after) <= changed + kept <= max(before, after), (before, after, result.stderr)

    # Deleting it (nothing names it) warns too, as before.
    result = delete_class(kubectl, name)
    assert result.returncode == 0, result.stderr
    assert "Warning: the globalDefault class is deleted: class-less pods will get priority 0" in result.stderr
