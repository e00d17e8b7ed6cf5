"""The controller through the real control plane: PodGroup phases as pods come, run, go and
finish, and stale reservations reclaimed from the ledger. The session's controller (started by
localcluster, leader-elected) does the work."""

from __future__ import annotations

import datetime as dt

import pytest

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.ledger import Entry
from priogate.record_codec import DEFAULT_LEDGER_NAMESPACE, entries_of, record_object, record_of, record_path
from tests.builders import pod, podgroup
from tests.e2e.controller_helpers import delete_pod, groups_path, pod_running, wait_phase
from tests.e2e.helpers import wait_for
from tests.e2e.test_podgroup_quota import create_quota


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


def condition(group: dict, type_: str) -> dict:
    return next(c for c in group["status"]["conditions"] if c["type"] == type_)


def test_phases_follow_quota_and_members(client: ApiClient, namespace: str):
    pods = resource_path("v1", "pods", namespace)
    create_quota(client, namespace, "4")
    # 2 of the 4 quota cpus are used by a pod outside any group.
    client.create(pods, pod("filler", namespace=None, cpu="2", limits={"cpu": "2"}))
    wait_for(lambda: pod_running(client, namespace, "filler"), 60, "the filler pod runs")
    wait_for(
        lambda: (
            client.get(resource_path("v1", "resourcequotas", namespace, "compute"))["status"]["used"]["cpu"]
            == "2"
        ),
        60,
        "the quota counts the filler",
    )

    # minResources 3 is within the quota (the webhook admits it) but not within what is free.
    client.create(
        groups_path(namespace), podgroup("gang", namespace=None, min_member=3, min_resources={"cpu": "3"})
    )
    group = wait_phase(client, namespace, "gang", "Pending")
    unschedulable = condition(group, "Unschedulable")
    assert unschedulable["status"] == "True" and unschedulable["reason"] == "NotEnoughResources"
    assert "quota compute insufficient" in unschedulable["message"]

    delete_pod(client, namespace, "filler")
    group = wait_phase(client, namespace, "gang", "Inqueue")
    assert condition(group, "Unschedulable")["status"] == "False"

    for i in range(3):
        client.create(pods, pod(f"m{i}", namespace=None, cpu="1", limits={"cpu": "1"}, group="gang"))
    group = wait_phase(client, namespace, "gang", "Running")
    wait_for(
        lambda: client.get(groups_path(namespace, "gang"))["status"].get("running") == 3,
        60,
        "status.running is 3",
    )
    scheduled = condition(client.get(groups_path(namespace, "gang")), "Scheduled")
    assert scheduled["status"] == "True" and scheduled["message"] == "3/3 members scheduled"

    # Losing members below minMember while one still runs: the gang is broken but alive.
    delete_pod(client, namespace, "m0")
    delete_pod(client, namespace, "m1")
    group = wait_phase(client, namespace, "gang", "Unknown")
    assert condition(group, "Unschedulable")["reason"] == "GangBroken"

    # None left: back through Pending, and enqueued again since the quota is free.
    delete_pod(client, namespace, "m2")
    group = wait_phase(client, namespace, "gang", "Inqueue")
    assert group["status"]["running"] == 0

    # Every phase change is an Event on the PodGroup (what `kubectl describe podgroup` shows).
    def phase_events() -> list[tuple[str, str, str]]:
        events = client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]
        mine = [e for e in events if e["regarding"]["name"] == "gang" and e.get("action") == "UpdatePhase"]
        return [(e["type"], e["reason"], e["note"]) for e in sorted(mine, key=lambda e: e["eventTime"])]

    wait_for(lambda: len(phase_events()) >= 6, 30, "six phase-change events on the PodGroup")
    seen = phase_events()
    assert [reason for _, reason, _ in seen][:6] == [
        "Pending",
        "Inqueue",
        "Running",
        "Unknown",
        "Pending",
        "Inqueue",
    ]
    assert seen[0] == ("Normal", "Pending", f"phase none -> Pending: {unschedulable['message']}")
    assert seen[3][:2] == ("Warning", "Unknown")


def test_a_finished_gang_is_completed(client: ApiClient, namespace: str):
    client.create(groups_path(namespace), podgroup("batch", namespace=None, min_member=3))
    # kwok finishes Job pods as soon as they run.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "batch"},
        "spec": {
            "completions": 3,
            "parallelism": 3,
            "template": {
                "metadata": {"annotations": {"scheduling.k8s.io/group-name": "batch"}},
                "spec": {
                    **pod("x", namespace=None, cpu="100m", limits={"cpu": "100m"})["spec"],
                    "restartPolicy": "Never",
                },
            },
        },
    }
    client.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    group = wait_phase(client, namespace, "batch", "Completed", timeout=90)
    assert group["status"]["succeeded"] == 3
    assert group["status"]["running"] == 0


def _inject_stale_entry(client: ApiClient, namespace: str, key: str) -> dict:
    admitted = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    stale = Entry("never-stored", key, {"cpu": "1"}, 1, "", admitted)
    for _ in range(10):
        ledger = client.get(record_path(DEFAULT_LEDGER_NAMESPACE, namespace))
        record = record_of(ledger)
        record = record.with_entries({**record.entries, key: stale})
        version = ledger["metadata"]["resourceVersion"]
        try:
            return client.replace(
                record_path(DEFAULT_LEDGER_NAMESPACE, namespace),
                record_object(DEFAULT_LEDGER_NAMESPACE, namespace, record, version),
            )  # carries the resourceVersion read
        except ApiError as e:
            if e.status != 409:
                raise
    raise AssertionError("the ledger kept changing")


def test_stale_reservation_is_reclaimed(client: ApiClient, namespace: str):
    create_quota(client, namespace, "4")
    created = client.create(
        groups_path(namespace), podgroup("real", namespace=None, min_member=1, min_resources={"cpu": "1"})
    )
    uid = created["metadata"]["uid"]
    wait_for(
        lambda: uid in entries_of(client.get(record_path(DEFAULT_LEDGER_NAMESPACE, namespace))),
        30,
        "the webhook reserved for it",
    )

    stale_uid = "00000000-0000-0000-0000-00000000dead"
    # The written object, not a re-read: the controller may reclaim the entry at once.
    assert stale_uid in entries_of(_inject_stale_entry(client, namespace, stale_uid))

    wait_for(
        lambda: stale_uid not in entries_of(client.get(record_path(DEFAULT_LEDGER_NAMESPACE, namespace))),
        60,
        "the controller removed the stale reservation",
    )
    assert uid in entries_of(client.get(record_path(DEFAULT_LEDGER_NAMESPACE, namespace))), (
        "a live group's reservation was removed"
    )
