"""The hooks' matchConditions, as kube-apiserver evaluates them (docs/modes.md, "What each hook
costs"): a write the rule would pass unchanged is not sent to priogate, and a write the rule
acts on still is. Counted with kube-apiserver's own apiserver_admission_webhook_request_total.

The test run's cluster runs with the built-in Priority plugin disabled (the plugin-replaced
policy), where the pod priority hook is registered.
"""

from __future__ import annotations

import pytest

from localcluster import LocalCluster
from localcluster.api import metric_sum
from localcluster.webhooks import WEBHOOK_METRIC
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from tests.builders import pod, podgroup, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.controller_helpers import groups_path
from tests.e2e.helpers import wait_for

MERGE = "application/merge-patch+json"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
POD_PRIORITY = "pod-priority.priogate.io"
PG_DEFAULTS = "podgroup-defaults.priogate.io"
PG_ANNOTATIONS = "podgroup-annotations.priogate.io"
PG_ENROLMENT = "podgroup-enrolment.priogate.io"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


def calls(client: ApiClient, hook: str, operation: str) -> float:
    return metric_sum(client.get_text("/metrics"), WEBHOOK_METRIC, {"name": hook, "operation": operation})


def patch(client: ApiClient, path: str, body: dict) -> dict:
    return client.request("PATCH", path, body=body, content_type=MERGE)


def test_a_pod_update_reaches_the_priority_hook_only_without_priority(
    client, namespace, classes: ClassTracker
):
    cls = classes.name("cond")
    client.create(PRIORITY_CLASSES, priority_class(cls, value=321, preemption_policy=None))
    path = resource_path("v1", "pods", namespace)
    # Bound to a node that does not exist: no scheduler or kubelet writes it, so the replace
    # below cannot meet a newer resourceVersion.
    client.create(path, pod("p", namespace=None, priority_class=cls, cpu="10m", node="e2e-nowhere"))
    before = calls(client, POD_PRIORITY, "UPDATE")
    patch(client, f"{path}/p", {"metadata": {"labels": {"touched": "yes"}}})
    assert calls(client, POD_PRIORITY, "UPDATE") == before, "a label change was sent to the pod priority hook"

    # A replace that drops the integer (an old manifest) is sent, and the hook carries it over.
    stored = client.get(f"{path}/p")
    del stored["spec"]["priority"]
    replaced = client.replace(f"{path}/p", stored)
    assert calls(client, POD_PRIORITY, "UPDATE") == before + 1
    assert replaced["spec"]["priority"] == 321


def test_a_podgroup_update_reaches_the_hooks_only_when_they_act(client, namespace, classes: ClassTracker):
    cls = classes.name("cond")
    client.create(PRIORITY_CLASSES, priority_class(cls, value=100, preemption_policy=None))
    path = groups_path(namespace)
    client.create(path, podgroup("g", namespace=None, min_member=1))
    defaults, annotations = calls(client, PG_DEFAULTS, "UPDATE"), calls(client, PG_ANNOTATIONS, "UPDATE")

    patch(client, f"{path}/g", {"metadata": {"labels": {"touched": "yes"}}})
    assert calls(client, PG_DEFAULTS, "UPDATE") == defaults, "a label change was sent to the defaults hook"
    assert calls(client, PG_ANNOTATIONS, "UPDATE") == annotations, (
        "a label change was sent to the annotation hook"
    )

    # Naming a class is a new claim: resolved by the defaults hook, not the annotation hook.
    patch(client, f"{path}/g", {"spec": {"priorityClassName": cls}})
    assert calls(client, PG_DEFAULTS, "UPDATE") == defaults + 1
    assert calls(client, PG_ANNOTATIONS, "UPDATE") == annotations

    # A `priogate.io/` annotation from anyone but the controller is still refused.
    with pytest.raises(ApiError) as refused:
        patch(client, f"{path}/g", {"metadata": {"annotations": {"priogate.io/preemption": "{}"}}})
    assert refused.value.status == 403
    assert "written only by the priogate controller" in str(refused.value)
    assert calls(client, PG_ANNOTATIONS, "UPDATE") == annotations + 1


def test_a_quota_write_reaches_the_fence_hook_only_when_it_creates_or_changes_a_spec(client, namespace):
    """kube-controller-manager's status writes and metadata-only updates change no limit."""
    hook, path = "resourcequota-fence.priogate.io", resource_path("v1", "resourcequotas", namespace)
    before = calls(client, hook, "CREATE")
    client.create(path, {"metadata": {"name": "cond"}, "spec": {"hard": {"pods": "5"}}})
    assert calls(client, hook, "CREATE") == before + 1
    updates = calls(client, hook, "UPDATE")
    wait_for(
        lambda: bool((client.get(f"{path}/cond").get("status") or {}).get("used")), 60, "status.used", 0.2
    )
    patch(client, f"{path}/cond", {"metadata": {"labels": {"touched": "yes"}}})
    assert calls(client, hook, "UPDATE") == updates, "a status or label write was sent to the quota hook"
    patch(client, f"{path}/cond", {"spec": {"hard": {"pods": "6"}}})
    assert calls(client, hook, "UPDATE") == updates + 1


@pytest.mark.parametrize(
    ("spec", "called"),
    [
        ({"minMember": 0}, False),  # claims nothing: no quota can refuse it
        ({"minMember": 0, "minResources": {"cpu": "1"}}, True),
        ({"minMember": 2}, True),  # claims 2 pods, whatever its minResources
        ({}, True),  # minMember defaulted: 1 pod
        ({"minMember": 0, "priorityClassName": "system-cluster-critical"}, False),
    ],
    ids=["nothing", "resources", "members", "defaulted", "class-only"],
)
def test_a_podgroup_reaches_the_enrolment_hook_when_it_claims_something(client, namespace, spec, called):
    """In a namespace that is not enrolled, every PodGroup that claims a pod or a resource is
    judged (a quota on pods, or one scoped to its class, binds it); only a group claiming
    nothing is spared the round trip."""
    labels = client.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {}
    assert labels.get("priogate.io/reservations") != "true"
    before = calls(client, PG_ENROLMENT, "CREATE")
    body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"}}
    client.create(groups_path(namespace), {**body, "spec": spec})
    after = calls(client, PG_ENROLMENT, "CREATE")
    # A group that enrols the namespace also sends the enrolment's dry-run probes through the
    # hook (priogate.scope): at least one call, then.
    assert (after > before) if called else (after == before), (spec, before, after)
