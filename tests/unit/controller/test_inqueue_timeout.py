"""The reconciler's Inqueue timeout: an Inqueue group with no member bound, a member the
scheduler could not place and no preemption possible goes back to Pending, reason
InqueueTimeout, once --inqueue-timeout has passed; then it backs off."""

from __future__ import annotations

import time

from controller.caches import Caches
from controller.reconcile import Reconciler
from priogate.kube.cache import WatchCache
from priogate.phase import INQUEUE_TIMEOUT


def member(unschedulable: bool) -> dict:
    conditions = (
        [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}] if unschedulable else []
    )
    return {
        "metadata": {
            "name": "m0",
            "namespace": "ns",
            "annotations": {"scheduling.k8s.io/group-name": "gang"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": conditions},
    }


GANG = {
    "metadata": {"name": "gang", "namespace": "ns", "uid": "gang"},
    "spec": {"minMember": 1, "minResources": {"cpu": "1"}},
    "status": {"phase": "Inqueue"},
}


def reconciler(pods: list[dict], timeout: float) -> Reconciler:
    caches = Caches(
        podgroups=WatchCache.static("podgroups", [GANG]),  # type: ignore[arg-type]
        pods=WatchCache.static("pods", pods),  # type: ignore[arg-type]
        quotas=WatchCache.static("quotas", []),  # type: ignore[arg-type]
        nodes=WatchCache.static(  # type: ignore[arg-type]
            "nodes", [{"metadata": {"name": "n1"}, "spec": {}, "status": {"allocatable": {"cpu": "8"}}}]
        ),
        ledgers=WatchCache.static("ledgers", []),  # type: ignore[arg-type]
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", []),
    )
    return Reconciler(None, caches, None, inqueue_timeout=timeout, enqueue_backoff=60)  # type: ignore[arg-type]


def unschedulable_condition(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Unschedulable")


def test_stuck_past_the_timeout_goes_back_to_pending_with_the_reason():
    pods = [member(unschedulable=True)]
    r = reconciler(pods, timeout=0.05)
    r._track_stuck("ns/gang", GANG, pods, "")  # gang preemption off: no preemption possible
    assert r.desired_status(GANG, pods)["phase"] == "Inqueue"  # not yet
    time.sleep(0.06)
    status = r.desired_status(GANG, pods)
    assert status["phase"] == "Pending"
    condition = unschedulable_condition(status)
    assert condition["reason"] == INQUEUE_TIMEOUT and "Inqueue for more than" in condition["message"]
    # rolled back just now: the group backs off instead of being enqueued again at once
    backing = r.desired_status({**GANG, "status": status}, pods)
    assert backing["phase"] == "Pending" and unschedulable_condition(backing)["reason"] == INQUEUE_TIMEOUT


def test_not_stuck_when_the_scheduler_has_not_failed_or_preemption_is_under_way():
    waiting = [member(unschedulable=False)]
    r = reconciler(waiting, timeout=0.01)
    r._track_stuck("ns/gang", GANG, waiting, "")
    time.sleep(0.02)
    assert r.desired_status(GANG, waiting)["phase"] == "Inqueue"
    pods = [member(unschedulable=True)]
    r = reconciler(pods, timeout=0.01)
    r.preemptor = object()  # type: ignore[assignment]  # gang preemption on
    for outcome in ("preempted", "resumed", "wait", "foreign-nomination"):
        r._track_stuck("ns/gang", GANG, pods, outcome)
        time.sleep(0.02)
        assert r.desired_status(GANG, pods)["phase"] == "Inqueue", outcome
    for outcome in ("unresolved", "refused"):
        r._stuck.clear()
        r._track_stuck("ns/gang", GANG, pods, outcome)
        time.sleep(0.02)
        assert r.desired_status(GANG, pods)["phase"] == "Pending", outcome
