"""controller/gang_preemptor.py's re-checks of a recorded decision before it acts: every failed
one stops, with a Warning Event on the PodGroup (the cluster of tests/unit/gang_cluster.py)."""

from __future__ import annotations

import copy
import time
from functools import partial
from typing import Any

import pytest

from controller.events import EventRecorder
from controller.gang_preemptor import GangPreemptor
from priogate import preemption_record as record
from priogate.kube.cache import WatchCache
from priogate.kube.client import resource_path
from priogate.preemption_record import RecordedDecision, Victim
from tests.unit.gang_cluster import (
    EVENTS_PATH,
    GROUP_PATH,
    NS,
    SOFT,
    Cluster,
    cluster,
    gang_group,
    pod_path,
    running,
)

# ---- re-checks: every failed one stops, with a Warning Event on the PodGroup ---------------------


def warnings(c: Cluster) -> list[str]:
    return [
        w.body["note"]
        for w in c.client.writes
        if w.path == EVENTS_PATH and w.body["type"] == "Warning" and w.body["reason"] == "PreemptionRefused"
    ]


def victims_untouched(c: Cluster, *names: str) -> bool:
    touched = [w for w in c.client.writes if any(w.path.startswith(pod_path(n)) for n in names)]
    return not touched and all(pod_path(n) in c.client.objects for n in names)


def unapplied(victims: tuple[Victim, ...], age: float = 5) -> RecordedDecision:
    """Decided `age` seconds ago: tables pass it as a partial, so a slow suite does not age a
    record made at collection past max_age."""
    return RecordedDecision("forged", time.time() - age, victims, {"g0": "n1"}, "written by someone")


def with_pod(c: Cluster, obj: dict) -> None:
    c.client.objects[pod_path(obj["metadata"]["name"])] = copy.deepcopy(obj)
    c.caches.pods.apply_event("ADDED", copy.deepcopy(obj))


def protected_pod(name: str, priority: int = 1, **meta: Any) -> dict:
    obj = running(name, 0)
    obj["spec"]["priority"] = priority
    obj["metadata"].update(meta)
    return obj


LOW1 = Victim(NS, "low1", "uid-low1", "n1")


@pytest.mark.parametrize(
    ("case", "decision", "extra_pod", "victim_name", "why"),
    [
        ("record too old", partial(unapplied, (LOW1,), age=3600), None, "low1", "old, more than"),
        ("record from the future", partial(unapplied, (LOW1,), age=-3600), None, "low1", "future"),
        (
            "uid differs",
            partial(unapplied, (Victim(NS, "low1", "uid-other", "n1"),)),
            None,
            "low1",
            "not the recorded pod",
        ),
        (
            "victim of equal priority",
            partial(unapplied, (Victim(NS, "peer", "uid-peer", "n1"),)),
            protected_pod("peer", priority=100),
            "peer",
            "not lower than the PodGroup's 100",
        ),
        (
            "victim of higher priority (a kube-system pod)",
            partial(unapplied, (Victim("kube-system", "etcd", "uid-etcd", "n1"),)),
            None,
            "",
            "",
        ),
        (
            "DaemonSet pod",
            partial(unapplied, (Victim(NS, "ds", "uid-ds", "n1"),)),
            protected_pod(
                "ds",
                ownerReferences=[{"kind": "DaemonSet", "name": "d", "uid": "x", "apiVersion": "apps/v1"}],
            ),
            "ds",
            "a DaemonSet pod",
        ),
        (
            "mirror pod",
            partial(unapplied, (Victim(NS, "static", "uid-static", "n1"),)),
            protected_pod("static", annotations={"kubernetes.io/config.mirror": "x"}),
            "static",
            "a mirror pod",
        ),
        (
            "opted out (hard mode)",
            partial(unapplied, (Victim(NS, "shy", "uid-shy", "n1"),)),
            protected_pod("shy", labels={"priogate.io/allow-preemption": "false"}),
            "shy",
            "opted out",
        ),
    ],
)
def test_a_recorded_decision_failing_a_recheck_is_stopped(case, decision, extra_pod, victim_name, why):
    decision = decision()
    c = cluster(gang_group(decision))
    if case.startswith("victim of higher priority"):
        etcd = protected_pod("etcd", priority=2_000_000_000)
        etcd["metadata"].update(namespace="kube-system", uid="uid-etcd")
        c.client.objects[resource_path("v1", "pods", "kube-system", "etcd")] = copy.deepcopy(etcd)
        c.caches.pods.apply_event("ADDED", copy.deepcopy(etcd))
        why = "has priority 2000000000, not lower than the PodGroup's 100"
    elif extra_pod is not None:
        with_pod(c, extra_pod)
    assert c.handle(c.preemptor()) == "refused", case
    assert not [w for w in c.client.writes if w.method == "DELETE"], case
    assert not [w for w in c.client.writes if "/pods/" in w.path and w.path.endswith("/status")], case
    (note,) = warnings(c)
    assert why in note and "forged" in note, (case, note)
    stored = c.recorded()
    assert stored is not None and stored.applied and why in stored.stopped, case
    # stopped: never resumed, and its victims are not waited for (a new decision may follow)
    assert (
        record.next_step(stored, True, {v.uid for v in decision.victims}, time.time() + 60)
        is record.Step.DECIDE
    )


def test_opted_out_victims_may_go_in_soft_mode():
    c = cluster(gang_group(unapplied((Victim(NS, "shy", "uid-shy", "n1"),))))
    with_pod(c, protected_pod("shy", labels={"priogate.io/allow-preemption": "false"}))
    preemptor = GangPreemptor(
        c.client,
        c.caches,
        EventRecorder(c.client, "test"),
        lambda: True,
        policy=SOFT,
    )
    assert c.handle(preemptor) == "resumed"


def test_a_group_that_no_longer_needs_preemption_is_not_acted_for():
    c = cluster(gang_group(unapplied((LOW1,))))
    bound = c.caches.pods.get(NS, "g0")
    assert bound is not None
    bound = copy.deepcopy(bound)
    bound["spec"]["nodeName"] = "n1"
    c.caches.pods.apply_event("MODIFIED", bound)  # the member got bound meanwhile
    assert c.handle(c.preemptor()) == "refused"
    assert victims_untouched(c, "low1", "low2")
    (note,) = warnings(c)
    assert "no longer needs preemption" in note


def test_a_group_deleted_mid_way_stops_the_deletions():
    c = cluster()
    deletes = 0
    real = c.client.request

    def request(method: str, path: str, **kw: Any) -> Any:
        nonlocal deletes
        out = real(method, path, **kw)
        if method == "DELETE" and path.startswith(pod_path("low")):
            deletes += 1
            c.client.objects.pop(GROUP_PATH, None)  # the group is deleted after the first victim
        return out

    c.client.request = request  # type: ignore[method-assign]
    assert c.handle(c.preemptor()) == "stopped"
    assert deletes == 1
    assert pod_path("low2") in c.client.objects
    (note,) = warnings(c)
    assert "the PodGroup was deleted" in note


def test_a_record_replaced_mid_way_stops_the_deletions():
    c = cluster()
    real = c.client.request

    def request(method: str, path: str, **kw: Any) -> Any:
        out = real(method, path, **kw)
        if method == "DELETE" and path.startswith(pod_path("low")):
            other = unapplied((LOW1,))
            c.client.objects[GROUP_PATH]["metadata"]["annotations"][record.ANNOTATION] = other.to_annotation()
        return out

    c.client.request = request  # type: ignore[method-assign]
    assert c.handle(c.preemptor()) == "stopped"
    assert pod_path("low2") in c.client.objects
    assert "record changed" in warnings(c)[0]


def test_a_new_decision_is_checked_too():
    # The engine picks low-priority victims; a PodGroup whose class is unknown ranks by its
    # members' priority (here 0), so nothing is lower and the decision is refused unrecorded.
    c = cluster()
    preemptor = c.preemptor()
    preemptor._decide = lambda group, key: unapplied((LOW1,))  # type: ignore[method-assign]
    c.caches.classes = WatchCache.static("classes", [])
    assert c.handle(preemptor) == "refused"
    assert c.recorded() is None  # nothing recorded
    assert victims_untouched(c, "low1", "low2")
