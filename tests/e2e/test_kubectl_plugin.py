"""`kubectl priogate` through kubectl's own plugin mechanism, against the real control plane.

kubectl finds the plugin as an executable named kubectl-priogate on PATH ("Extend kubectl with
plugins"); the test puts a launcher of this checkout's package there instead of installing it,
and runs `kubectl priogate ...` as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.ledger.codec import CONFIGMAP_MAX_BYTES, DEFAULT_LEDGER_NAMESPACE, ledger_path, stored_size
from priogate.podgroup import GROUP_VERSION
from tests.builders import pod, podgroup, priority_class
from tests.e2e.conftest import ClassTracker
from tests.e2e.controller_helpers import groups_path, pod_running
from tests.e2e.helpers import KUBECTL, unique, wait_for
from tests.e2e.plugin import Run, ok, plugin_runner
from tests.e2e.test_controller_preemption import fill_nodes, free_cpu

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


@pytest.fixture
def priogate(cluster: LocalCluster, plugin_path: Path) -> Run:
    return plugin_runner(plugin_path, cluster.kubeconfig)


def test_plugin_is_found_by_kubectl(plugin_path: Path):
    env = {**os.environ, "PATH": f"{plugin_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run([KUBECTL, "plugin", "list"], capture_output=True, text=True, env=env, check=False)
    assert str(plugin_path / "kubectl-priogate") in listed.stdout


def test_reservations_of_a_namespace_with_a_quota_and_podgroups(client: ApiClient, namespace: str, priogate):
    quota_path = resource_path("v1", "resourcequotas", namespace)
    client.create(
        quota_path, {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": "10", "pods": "10"}}}
    )
    wait_for(
        lambda: "used" in (client.get(f"{quota_path}/compute").get("status") or {}),
        60,
        "the quota controller fills status.used",
    )
    client.create(
        groups_path(namespace), podgroup("train", namespace=None, min_member=2, min_resources={"cpu": "4"})
    )
    client.create(groups_path(namespace), podgroup("eval", namespace=None, min_resources={"cpu": "2"}))
    client.create(
        resource_path("v1", "pods", namespace), pod("train-0", namespace=None, cpu="1", group="train")
    )
    wait_for(
        lambda: (client.get(f"{quota_path}/compute").get("status") or {}).get("used", {}).get("cpu") == "1",
        60,
        "the quota counts the member",
    )

    table = ok(priogate("reservations", "-n", namespace)).splitlines()
    assert table[0].split() == [
        "QUOTA",
        "RESOURCE",
        "HARD",
        "USED",
        "RESERVED",
        "RESERVED-UNUSED",
        "FREE",
        "PODGROUPS",
    ]
    # cpu: 6 reserved, train's member uses 1 of its 4, so 5 unused and 10 - 1 - 5 = 4 free.
    assert table[1].split() == ["compute", "cpu", "10", "1", "6", "5", "4", "eval=2,train=4"]
    assert table[2].split() == ["compute", "pods", "10", "1", "3", "2", "7", "eval=1,train=2"]

    ledger = ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace)
    before = stored_size(client.get(ledger))
    data = json.loads(ok(priogate("reservations", "-n", namespace, "-o", "json")))
    after = stored_size(client.get(ledger))  # the controller may rewrite it meanwhile
    (ns,) = data["namespaces"]
    assert ns["quotas"][0]["resources"]["cpu"]["free"] == "4"
    # The ledger's size as kube-apiserver counts it against the ConfigMap limit.
    assert ns["ledger"]["bytes"] in {before, after}
    assert ns["ledger"]["limitBytes"] == CONFIGMAP_MAX_BYTES
    assert {g["name"]: g["reservedUnused"].get("cpu") for g in ns["podGroups"]} == {"eval": "2", "train": "3"}

    everywhere = ok(priogate("reservations", "-A"))
    assert everywhere.startswith("NAMESPACE ")
    assert any(line.split()[:3] == [namespace, "compute", "cpu"] for line in everywhere.splitlines())


def test_simulate_a_high_priority_pod_on_a_full_cluster_names_victims(
    client: ApiClient, namespace: str, classes: ClassTracker, priogate, tmp_path: Path
):
    low, high = classes.name("low"), classes.name("high")
    client.create(CLASSES, priority_class(low, value=10, preemption_policy=None))
    client.create(CLASSES, priority_class(high, value=1000, preemption_policy=None))
    fillers = fill_nodes(client, namespace, low)
    wait_for(lambda: all(pod_running(client, namespace, f) for f in fillers), 90, "the fillers run")
    assert all(cpu < 1 for cpu in free_cpu(client).values()), "the nodes should be full"

    manifest = tmp_path / "urgent.yaml"
    manifest.write_text(
        yaml.safe_dump(pod("urgent", namespace=None, cpu="1", priority_class=high, created=None))
    )
    data = json.loads(ok(priogate("simulate", "-n", namespace, "-f", str(manifest), "-o", "json")))
    assert {"preemptor": f"{namespace}/urgent", "status": "preempt"} in data["hypothetical"]
    (decision,) = [d for d in data["decisions"] if d["preemptor"] == f"{namespace}/urgent"]
    victims = {v.split("/", 1)[1] for v in decision["victims"]}
    assert victims and victims <= set(fillers), decision
    assert all(v.startswith(f"{namespace}/") for v in decision["victims"])

    table = ok(priogate("simulate", "-n", namespace, "-f", str(manifest), "--explain"))
    assert f"{namespace}/urgent (new)   preempt" in table
    assert "other nodes" in table, "--explain says why the other nodes lost"
    pods = {p["metadata"]["name"] for p in client.get(resource_path("v1", "pods", namespace))["items"]}
    assert "urgent" not in pods and set(fillers) <= pods, "simulate changes nothing"


def test_why_a_pending_group_a_pending_pod_and_a_missing_group(client: ApiClient, namespace: str, priogate):
    # More than the cluster has: admitted by the webhook (no quota here), held Pending by the
    # controller with an Unschedulable condition.
    client.create(groups_path(namespace), podgroup("huge", namespace=None, min_resources={"cpu": "1000"}))
    client.create(resource_path("v1", "pods", namespace), pod("big", namespace=None, cpu="100"))

    def group_unschedulable() -> bool:
        conditions = (client.get(groups_path(namespace, "huge")).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Unschedulable" and c["status"] == "True" for c in conditions)

    wait_for(group_unschedulable, 60, "the controller marks the group Unschedulable")
    text = ok(priogate("why", "podgroup/huge", "-n", namespace))
    lines = dict(line.split(":", 1) for line in text.splitlines()[:3])
    assert lines["State"].strip() == "Pending"
    assert lines["Why"].strip().startswith("not admitted to its queue: NotEnoughResources:"), text
    assert "Unschedulable=True (NotEnoughResources)" in text
    assert "Reservation:    holds minResources cpu=1k" in text

    def pod_unschedulable() -> bool:
        conditions = (
            client.get(resource_path("v1", "pods", namespace, "big"))["status"].get("conditions") or []
        )
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

    wait_for(pod_unschedulable, 60, "the scheduler marks the pod Unschedulable")
    report = yaml.safe_load(ok(priogate("why", "big", "-n", namespace, "-o", "yaml")))
    assert report["state"] == "Pending"
    assert report["why"].startswith("unschedulable: 0/3 nodes are available"), report["why"]
    assert any(e["reason"] == "FailedScheduling" for e in report["events"]), report["events"]

    missing = priogate("why", "podgroup/nope", "-n", namespace)
    assert missing.returncode == 1
    assert (
        missing.stderr == 'Error from server (NotFound): podgroups.scheduling.volcano.sh "nope" not found\n'
    )
    missing = priogate("why", "nope", "-n", namespace)
    assert (missing.returncode, missing.stderr) == (
        1,
        'Error from server (NotFound): pods "nope" not found\n',
    )
    usage = priogate("why", "deploy/x")
    assert usage.returncode == 1 and usage.stderr.startswith("error: "), usage.stderr


def test_a_namespace_user_asks_why_and_sees_reservations(client: ApiClient, tenant, priogate):
    """As a user with the built-in `edit` role in one namespace only (--as, kubectl's
    impersonation flag): PodGroups of other namespaces are not theirs to list, so `why` reads
    the preemption records of their own namespace instead of failing."""
    client.create(resource_path("v1", "pods", tenant.namespace), pod("big", namespace=None, cpu="100"))
    client.create(
        groups_path(tenant.namespace), podgroup("train", namespace=None, min_resources={"cpu": "1"})
    )

    def unschedulable() -> bool:
        got = client.get(resource_path("v1", "pods", tenant.namespace, "big"))
        return any(c.get("reason") == "Unschedulable" for c in got["status"].get("conditions") or [])

    wait_for(unschedulable, 60, "the scheduler marks the pod Unschedulable")
    as_tenant = ("-n", tenant.namespace, f"--as={tenant.user}")
    text = ok(priogate("why", "big", *as_tenant))
    assert "State:          Pending" in text and "unschedulable: 0/3 nodes are available" in text
    group = ok(priogate("why", "podgroup/train", *as_tenant))
    assert "Reservation:    holds minResources cpu=1" in group, group
    table = ok(priogate("reservations", *as_tenant))
    assert table.splitlines()[1].split()[:3] == ["<none>", "cpu", "<none>"], table
    # The ledger lives where the tenant may not read it: the entries come from their own
    # PodGroups, and its size is unknown rather than guessed.
    (ns,) = json.loads(ok(priogate("reservations", *as_tenant, "-o", "json")))["namespaces"]
    assert ns["ledger"] is None
    assert [g["name"] for g in ns["podGroups"]] == ["train"]
    denied = priogate("simulate", *as_tenant)
    assert denied.returncode == 1 and denied.stderr.startswith("Error from server (Forbidden): "), (
        denied.stderr
    )


# A line break, a screen clear, the cursor sent home and a forged line: what a terminal obeys.
FORGED = "\n\x1b[2J\x1b[H State: Running"
FORGED_SHOWN = "\\n\\x1b[2J\\x1b[H State: Running"


def test_control_characters_a_tenant_writes_reach_the_admin_escaped(client: ApiClient, tenant, priogate):
    """A tenant (built-in `edit` role) writes control characters where priogate repeats them to
    the admin: the note of an Event about their PodGroup (out of every priogate hook's reach, as
    messages copied from other objects are). A minResources name with them is refused at
    admission (tests/e2e/test_podgroup_claims.py); one stored where no hook judged it (the
    system namespaces, or before the check) is named by the controller's capacity verdict in the
    group's Unschedulable condition and its phase Event. The admin's `kubectl priogate why` shows
    each escaped, never a screen clear or a second State line; the condition and the
    controller's Event are written escaped."""
    assert tenant.can("create", "events"), "the built-in edit role writes core Events"
    created = tenant.create_podgroup(podgroup("forged", namespace=None, min_member=1))
    tenant.kubectl(
        "create",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "forged.tenant", "namespace": tenant.namespace},
                "involvedObject": {
                    "apiVersion": GROUP_VERSION,
                    "kind": "PodGroup",
                    "namespace": tenant.namespace,
                    "name": "forged",
                    "uid": created["metadata"]["uid"],
                },
                "type": "Normal",
                "reason": "Running",
                "message": f"all members running{FORGED}",
                "source": {"component": "tenant"},
            }
        ),
    )
    text = ok(priogate("why", "podgroup/forged", "-n", tenant.namespace))
    assert "\x1b" not in text, f"the admin's terminal would obey:\n{text!r}"
    assert f"all members running{FORGED_SHOWN}" in text, text
    assert len([line for line in text.splitlines() if line.lstrip().startswith("State:")]) == 1, text

    # A forged resource name, stored where no quota hook judges it (kube-system is exempt).
    namespace, name = "kube-system", unique("forged")
    client.create(
        groups_path(namespace),
        podgroup(name, namespace=None, min_member=1, min_resources={f"cpu{FORGED}": "1"}),
    )
    try:

        def unschedulable() -> str:
            got = client.get(groups_path(namespace, name))
            return next(
                (
                    c.get("message") or ""
                    for c in (got.get("status") or {}).get("conditions") or []
                    if c["type"] == "Unschedulable" and c["status"] == "True"
                ),
                "",
            )

        wait_for(lambda: bool(unschedulable()), 60, "the controller marks the group Unschedulable")

        def controller_notes() -> list[str]:
            events = client.get(
                resource_path("events.k8s.io/v1", "events", namespace),
                query=[("fieldSelector", f"regarding.kind=PodGroup,regarding.name={name}")],
            )["items"]
            return [
                e.get("note") or ""
                for e in events
                if e.get("reportingController") == "priogate.io/controller"
            ]

        wait_for(lambda: bool(controller_notes()), 60, "the controller records the phase Event")

        # What the admin's terminal receives.
        text = ok(priogate("why", f"podgroup/{name}", "-n", namespace))
        assert "\x1b" not in text, f"the admin's terminal would obey:\n{text!r}"
        states = [line for line in text.splitlines() if line.lstrip().startswith("State:")]
        assert states == ["State:          Pending"], f"a forged State line:\n{text}"
        shown_key = f"minResources cpu{FORGED_SHOWN}"
        why = "Why:            not admitted to its queue: NotEnoughResources: cluster capacity insufficient"
        assert f"{why}: {shown_key}=1 exceed" in text, text
        assert f"phase none -> Pending: cluster capacity insufficient: {shown_key}=1" in text, text

        # What the controller wrote, which kubectl describe prints as it is.
        message = unschedulable()
        assert f"{shown_key}=1 exceed" in message and "\x1b" not in message, message
        (note,) = controller_notes()
        assert note == f"phase none -> Pending: {message}", note
    finally:
        client.delete(groups_path(namespace, name))
