"""Issue 11, stranding, through the real control plane: kube-apiserver's ResourceQuota plugin
charges a pod to status.used when it is created. A gang whose members exist but cannot bind
(no node matches them) must not be counted twice and demoted from Inqueue."""

from __future__ import annotations

import time

import pytest

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, load_client, resource_path
from tests.builders import pod, podgroup
from tests.e2e.controller_helpers import groups_path, phase, wait_phase
from tests.e2e.helpers import wait_for


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


def test_a_gang_whose_members_are_created_but_unbound_stays_inqueue(client: ApiClient, namespace: str):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "cpu"},
        "spec": {"hard": {"cpu": "4"}},
    }
    client.create(resource_path("v1", "resourcequotas", namespace), quota)
    wait_for(
        lambda: (
            "used"
            in (client.get(resource_path("v1", "resourcequotas", namespace, "cpu")).get("status") or {})
        ),
        30,
        "the quota controller fills status.used",
    )
    client.create(
        groups_path(namespace), podgroup("gang", namespace=None, min_member=3, min_resources={"cpu": "3"})
    )
    wait_phase(client, namespace, "gang", "Inqueue")

    pods = resource_path("v1", "pods", namespace)
    for i in range(3):
        member = pod(
            f"m{i}",
            namespace=None,
            cpu="1",
            limits={"cpu": "1"},
            group="gang",
            node_selector={"kubernetes.io/hostname": "nowhere"},  # created, never bound
        )
        client.create(pods, member)

    def used() -> str:
        return (
            (client.get(resource_path("v1", "resourcequotas", namespace, "cpu")).get("status") or {})
            .get("used", {})
            .get("cpu", "")
        )

    wait_for(lambda: used() == "3", 30, "the three created members are charged to the quota")

    # Several reconciles (pod events, the 10 s resync): the gang stays Inqueue.
    seen = set()
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        seen.add(phase(client, namespace, "gang"))
        time.sleep(0.5)
    assert seen == {"Inqueue"}, seen
    group = client.get(groups_path(namespace, "gang"))
    unschedulable = next(c for c in group["status"]["conditions"] if c["type"] == "Unschedulable")
    assert unschedulable["status"] == "False", unschedulable
    events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
    assert not [e for e in events if e["regarding"]["name"] == "gang" and e["reason"] == "Pending"], [
        e.get("note") for e in events
    ]
