"""Nobody but the controller can aim gang preemption (issue 11).

The controller deletes the pods a PodGroup's `priogate.io/preemption` record names. A tenant
with the built-in `edit` role in one namespace tries to write a record naming a kube-system pod
(its uid read from the API, as `kubectl get -o yaml` shows it): admission refuses it, and says
so. So does a cluster admin, who is not the controller either. And when a record is present
all the same (written here with the controller's own identity, the only one admission lets
through: as a controller bug or a disabled webhook would leave it), the controller's re-check
leaves the kube-system pod alone and records a Warning Event on the PodGroup.
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from tests.builders import pod, podgroup, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.controller_helpers import groups_path, pod_running, stuck_gang
from tests.e2e.helpers import unique, wait_for
from tests.e2e.tenant import Tenant

ANNOTATION = "priogate.io/preemption"
MERGE = "application/merge-patch+json"
REFUSED = "written only by the priogate controller"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


@pytest.fixture(scope="module")
def as_controller(cluster: LocalCluster) -> ApiClient:
    """The controller's identity (localcluster issues it a client certificate)."""
    return load_client(str(cluster.controller_kubeconfig))


@pytest.fixture
def system_pod(client: ApiClient) -> dict:
    """A running kube-system pod of system-cluster-critical priority: the forger's target."""
    name = unique("critical")
    path = resource_path("v1", "pods", "kube-system")
    client.create(path, pod(name, namespace=None, cpu="10m", priority_class="system-cluster-critical"))
    wait_for(lambda: pod_running(client, "kube-system", name), 60, f"kube-system/{name} runs")
    yield client.get(f"{path}/{name}")
    try:
        client.delete(f"{path}/{name}")
    except ApiError as e:
        if e.status != 404:
            raise


def forged(target: dict, decided_at: float | None = None) -> str:
    meta = target["metadata"]
    return json.dumps(
        {
            "id": "forged0001",
            "decidedAt": time.time() if decided_at is None else decided_at,
            "victims": [
                {"namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"], "node": ""}
            ],
            "nominated": {},
            "reason": "trust me",
            "applied": False,
        }
    )


def untouched(client: ApiClient, target: dict) -> bool:
    meta = target["metadata"]
    now = client.get(resource_path("v1", "pods", meta["namespace"], meta["name"]))
    conditions = {c["type"] for c in now.get("status", {}).get("conditions") or []}
    return (
        now["metadata"]["uid"] == meta["uid"]
        and not now["metadata"].get("deletionTimestamp")
        and "DisruptionTarget" not in conditions
    )


def test_a_tenant_cannot_write_a_preemption_record(tenant: Tenant, client: ApiClient, system_pod: dict):
    assert tenant.can("patch", "podgroups", "scheduling.volcano.sh"), "the tenant may edit PodGroups"
    tenant.create_podgroup(podgroup("mine", namespace=None, min_member=1))
    record = forged(system_pod)

    with pytest.raises(ApiException) as refused:
        tenant.patch_podgroup("mine", {"metadata": {"annotations": {ANNOTATION: record}}})
    assert refused.value.status == 403
    body = json.loads(refused.value.body)
    assert REFUSED in body["message"] and tenant.user in body["message"], body["message"]
    assert ANNOTATION in body["message"]

    # Nor at creation, nor by a JSON patch.
    with pytest.raises(ApiException) as refused:
        forged_group = podgroup("other", namespace=None, min_member=1)
        forged_group["metadata"]["annotations"] = {ANNOTATION: record}
        tenant.create_podgroup(forged_group)
    assert refused.value.status == 403 and REFUSED in refused.value.body
    with pytest.raises(ApiException) as refused:
        tenant.patch_podgroup(
            "mine",
            [{"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION: record}}],
        )
    assert refused.value.status == 403 and REFUSED in refused.value.body

    assert ANNOTATION not in (tenant.get_podgroup("mine")["metadata"].get("annotations") or {})
    time.sleep(2)  # a few reconciles: nothing happens to the target
    assert untouched(client, system_pod)


def test_an_admin_is_not_the_controller_either(client: ApiClient, namespace: str, system_pod: dict):
    client.create(groups_path(namespace), podgroup("mine", namespace=None, min_member=1))
    patch = {"metadata": {"annotations": {ANNOTATION: forged(system_pod)}}}
    with pytest.raises(ApiError) as refused:
        client.request("PATCH", groups_path(namespace, "mine"), body=patch, content_type=MERGE)
    assert refused.value.status == 403
    assert REFUSED in str(refused.value) and "priogate-admin" in str(refused.value)


def test_a_record_present_all_the_same_is_refused_by_the_controller(
    client: ApiClient,
    as_controller: ApiClient,
    namespace: str,
    classes: ClassTracker,
    system_pod: dict,
):
    """A group that does need preemption (its member cannot be placed), of a high class, with a
    record naming the kube-system pod: the controller re-checks it (the victim's priority is
    not lower than the group's), deletes nothing, closes the record and says why."""
    high = classes.name("high")
    client.create("/apis/scheduling.k8s.io/v1/priorityclasses", priority_class(high, value=1000))
    stuck_gang(client, namespace, "gang", high)

    patch = {"metadata": {"annotations": {ANNOTATION: forged(system_pod)}}}
    as_controller.request("PATCH", groups_path(namespace, "gang"), body=patch, content_type=MERGE)

    def record() -> dict:
        annotations = client.get(groups_path(namespace, "gang"))["metadata"].get("annotations") or {}
        return json.loads(annotations.get(ANNOTATION, "{}"))

    wait_for(lambda: bool(record().get("stopped")), 60, "the controller closes the record")
    stopped = record()
    assert stopped["id"] == "forged0001" and stopped["applied"] is True
    assert "not lower than the PodGroup's 1000" in stopped["stopped"], stopped
    assert untouched(client, system_pod)

    # Events are sent from the controller's event thread, after the writes they describe.
    def refused() -> list[dict]:
        events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
        return [
            e
            for e in events
            if e["regarding"]["name"] == "gang"
            and e["type"] == "Warning"
            and e["reason"] == "PreemptionRefused"
        ]

    wait_for(lambda: bool(refused()), 30, "a PreemptionRefused warning on the gang")
    warnings = refused()
    note = warnings[0]["note"]
    assert system_pod["metadata"]["name"] in note and "not lower than" in note, note


def test_a_status_patch_carrying_another_uid_is_refused(client: ApiClient, namespace: str):
    """What the preemptor relies on for the DisruptionTarget condition: metadata.uid in a
    pods/status strategic merge patch acts as a precondition. kube-apiserver refuses it when the
    pod of that name has another uid (422: metadata.uid is immutable; not a 409), and patches the
    pod that has it."""
    path = resource_path("v1", "pods", namespace, "p")
    client.create(resource_path("v1", "pods", namespace), pod("p", namespace=None, cpu="10m"))
    uid = client.get(path)["metadata"]["uid"]
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByPriogate",
        "message": "test",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    body = {
        "metadata": {"uid": "00000000-0000-0000-0000-000000000000"},
        "status": {"conditions": [condition]},
    }
    with pytest.raises(ApiError) as refused:
        client.request(
            "PATCH", path + "/status", body=body, content_type="application/strategic-merge-patch+json"
        )
    assert refused.value.status == 422, refused.value
    assert "metadata.uid" in refused.value.message and "immutable" in refused.value.message
    body["metadata"]["uid"] = uid
    patched = client.request(
        "PATCH", path + "/status", body=body, content_type="application/strategic-merge-patch+json"
    )
    assert any(c["type"] == "DisruptionTarget" for c in patched["status"]["conditions"])
