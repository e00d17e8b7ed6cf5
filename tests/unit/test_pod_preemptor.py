"""controller/pod_preemptor.py against the in-memory API server (tests/fake_api.py): which
pods it decides for and in which order, kube-scheduler's eligibility, the writes it makes
(nomination, cleared lower nominations, DisruptionTarget condition, uid-preconditioned DELETE,
Events), their 404/409 handling, leadership and waiting for the watch. The Eviction API path and the
parity with `python -m controller simulate` are in test_pod_preemptor_eviction.py."""

from __future__ import annotations

from typing import Any

import pytest

from controller.pod_preemptor import Applied, candidate, caught_up, lower_nominations
from controller.victims import MERGE_PATCH, STRATEGIC_PATCH, NotLeader
from priogate import preemption_record as record
from priogate.kube.client import ApiError
from priogate.preemption.engine import GANG_MEMBER
from priogate.preemption.single import NOT_ELIGIBLE_NEVER, NOT_ELIGIBLE_TERMINATING
from priogate.preemption_record import Victim
from tests.builders import node, podgroup
from tests.unit.gang_cluster import EVENTS_PATH, NS, pod_path
from tests.unit.pod_cluster import UNSCHEDULABLE, cluster, pending, running

# ---- pure functions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pending("p", 1), True),
        (pending("p", 1, tried=False), False),  # the scheduler has not tried it yet
        (running("p", 1), False),
        (pending("p", 1, deleting=True), False),
        ({**pending("p", 1), "status": {"phase": "Failed", "conditions": [UNSCHEDULABLE]}}, False),
        (
            {**pending("p", 1), "status": {"conditions": [{**UNSCHEDULABLE, "reason": "SchedulingGated"}]}},
            False,
        ),
    ],
)
def test_candidate(obj: dict, expected: bool):
    assert candidate(obj) is expected


def test_lower_nominations_are_the_lower_pending_pods_nominated_to_the_node():
    pods = [
        pending("lower", 5, nominated="n1"),
        pending("equal", 10, nominated="n1"),
        pending("elsewhere", 5, nominated="n2"),
        pending("me", 5, nominated="n1"),
        pending("leaving", 5, nominated="n1", deleting=True),
        running("bound", 1),
    ]
    found = lower_nominations(pods, "n1", 10, f"{NS}/me")
    assert [p["metadata"]["name"] for p in found] == ["lower"]


def test_caught_up_once_the_nomination_and_every_victim_show():
    applied = Applied(NS, "hi", "uid-hi", "n1", (Victim(NS, "v", "uid-v", "n1"),), 0.0)
    cached: dict[str, dict] = {"hi": pending("hi", 10), "v": running("v", 1)}

    def get(_ns: str, name: str) -> dict | None:
        return cached.get(name)

    assert not caught_up(applied, get)  # neither shows yet
    cached["hi"] = pending("hi", 10, nominated="n1")
    assert not caught_up(applied, get)  # the victim is not terminating yet
    cached["v"] = running("v", 1)
    cached["v"]["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert caught_up(applied, get)
    del cached["v"]
    assert caught_up(applied, get)
    cached["hi"] = running("hi", 10)  # bound: the nomination is moot
    assert caught_up(applied, get)


# ---- order and eligibility ----------------------------------------------------------------------


def test_candidates_in_priority_then_creation_order():
    c = cluster(
        running("v", 1, cpu="4"),
        pending("low", 5, created=1),
        pending("late", 10, created=9),
        pending("early", 10, created=3),
        pending("untried", 50, tried=False),
    )
    assert c.preemptor().candidates() == [f"{NS}/early", f"{NS}/late", f"{NS}/low"]


def test_the_first_pod_in_order_preempts_and_the_sweep_waits_for_the_watch():
    c = cluster(running("v", 1, cpu="4"), pending("low", 5, created=1), pending("early", 10, created=3))
    preemptor = c.preemptor()
    sweep = preemptor.sweep()
    assert sweep.result == "preempted" and sweep.recheck_after
    nominations = [
        w for w in c.client.writes if w.path.endswith("/status") and "nominatedNodeName" in w.body["status"]
    ]
    assert [(w.path, w.body["status"]["nominatedNodeName"]) for w in nominations] == [
        (pod_path("early") + "/status", "n1")
    ]
    writes = len(c.client.writes)
    assert preemptor.sweep().result == "waiting"  # the cache does not show the writes yet
    assert len(c.client.writes) == writes
    c.sync_pods()
    # The watch shows "early" nominated to n1 and its victim gone: "low" (priority 5) cannot
    # take the room "early" (10) holds, and there is nothing else to preempt.
    assert preemptor.sweep().result == "idle"
    assert len(c.client.writes) == writes


def test_a_never_pod_does_not_preempt():
    c = cluster(running("v", 1, cpu="4"), pending("never", 10, preemption_policy="Never"))
    assert c.preemptor().sweep().result == "idle"
    assert c.client.writes == []
    assert c.preemptor().engine.decide_pod(f"{NS}/never").reason.startswith(NOT_ELIGIBLE_NEVER)


def test_a_pod_whose_nominated_node_still_holds_terminating_victims_waits():
    victim = running("v", 1, cpu="4")
    victim["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    victim["status"]["conditions"] = [record.disruption_condition("2024-01-01T00:00:00.000000Z", "x", "Pod")]
    c = cluster(
        victim,
        running("other", 1, cpu="4", node_name="n2"),
        pending("hi", 10, nominated="n1"),
        nodes=(node("n1", cpu="4"), node("n2", cpu="4")),
    )
    assert c.preemptor().sweep().result == "idle"
    assert c.client.writes == []
    assert c.preemptor().engine.decide_pod(f"{NS}/hi").reason.startswith(NOT_ELIGIBLE_TERMINATING)


def test_a_member_of_a_gang_short_of_min_member_is_left_to_the_gang_preemptor():
    group = podgroup("gang", min_member=2, priority_class="high", phase="Inqueue")
    c = cluster(running("v", 1, cpu="4"), pending("m0", 10, group="gang"), groups=(group,))
    assert c.preemptor().sweep().result == "idle"
    assert c.client.writes == []
    assert c.preemptor().engine.decide_pod(f"{NS}/m0").reason == GANG_MEMBER


# ---- the writes ---------------------------------------------------------------------------------


def test_the_writes_in_phases():
    """The nomination with the victims' conditions, then the lower nomination cleared, then each
    victim's DELETE before its Event, the preemptor's Event last."""
    c = cluster(
        running("v1", 1, start=0),
        running("v2", 2, start=5),
        pending("hi", 10),
        pending("lower", 5, cpu="1", nominated="n1", tried=False),
    )
    assert c.preemptor().sweep().result == "preempted"
    kinds = [
        ("EVENT", w.body["reason"], w.body["regarding"]["name"])
        if w.path == EVENTS_PATH
        else (w.method, w.path)
        for w in c.client.writes
    ]
    assert set(kinds[:3]) == {
        ("PATCH", pod_path("hi") + "/status"),  # the nomination
        ("PATCH", pod_path("v2") + "/status"),  # the conditions
        ("PATCH", pod_path("v1") + "/status"),
    }
    assert kinds[3] == ("PATCH", pod_path("lower") + "/status")  # its nomination cleared
    assert sorted(kinds[4:8]) == sorted(
        [("DELETE", pod_path(v)) for v in ("v1", "v2")] + [("EVENT", "Preempted", v) for v in ("v1", "v2")]
    )
    for v in ("v1", "v2"):
        assert kinds.index(("DELETE", pod_path(v))) < kinds.index(("EVENT", "Preempted", v))
    assert kinds[8:] == [("EVENT", "Preempting", "hi")]


def test_nomination_and_cleared_nomination_carry_uid_preconditions():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10), pending("lower", 5, cpu="1", nominated="n1"))
    c.preemptor().sweep()
    nominate, clear = [
        w for w in c.client.writes if w.method == "PATCH" and "nominatedNodeName" in w.body["status"]
    ]
    assert nominate.content_type == clear.content_type == MERGE_PATCH
    assert nominate.body == {"metadata": {"uid": "uid-hi"}, "status": {"nominatedNodeName": "n1"}}
    assert clear.body == {"metadata": {"uid": "uid-lower"}, "status": {"nominatedNodeName": None}}
    assert c.client.objects[pod_path("hi")]["status"]["nominatedNodeName"] == "n1"
    assert c.client.objects[pod_path("lower")]["status"]["nominatedNodeName"] is None


def test_the_victim_gets_priogates_condition_a_preempted_event_and_a_uid_preconditioned_delete():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    c.preemptor().sweep()
    (patch,) = [w for w in c.client.writes if w.path == pod_path("v") + "/status"]
    assert patch.content_type == STRATEGIC_PATCH
    assert patch.body["metadata"] == {"uid": "uid-v"}
    (condition,) = patch.body["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "DisruptionTarget",
        "True",
        "PreemptionByPriogate",
    )
    assert condition["message"] == f"priogate: preempted to make room for Pod {NS}/hi"
    (delete,) = [w for w in c.client.writes if w.method == "DELETE"]
    assert delete.path == pod_path("v") and delete.body["preconditions"] == {"uid": "uid-v"}
    assert "gracePeriodSeconds" not in delete.body  # the victim's own grace period
    victim_event, preemptor_event = c.events()
    assert victim_event["reason"] == "Preempted" and victim_event["type"] == "Normal"
    assert victim_event["regarding"]["name"] == "v"
    assert victim_event["note"].startswith("Preempted by pod uid-hi on node n1")  # kube-scheduler's
    assert victim_event["related"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": NS,
        "name": "hi",
        "uid": "uid-hi",
    }
    assert preemptor_event["reason"] == "Preempting" and preemptor_event["type"] == "Normal"
    assert preemptor_event["regarding"]["uid"] == "uid-hi"
    assert f"{NS}/v" in preemptor_event["note"] and "n1" in preemptor_event["note"]


def test_a_victim_replaced_since_the_decision_is_not_touched():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    c.client.objects[pod_path("v")]["metadata"]["uid"] = "uid-new"  # deleted and recreated
    assert c.preemptor().sweep().result == "preempted"
    assert pod_path("v") in c.client.objects  # the 422 (uid) and the 409 (precondition) were taken as done
    assert [e["reason"] for e in c.events()] == ["Preempting"]


def test_a_preemptor_gone_since_the_decision_deletes_no_victim():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    del c.client.objects[pod_path("hi")]
    assert c.preemptor().sweep().result == "gone"
    # The refused nomination, and the victim's condition written beside it (kube-controller-
    # manager's disruption controller resets a DisruptionTarget left on a pod not deleted).
    assert sorted(w.path for w in c.client.writes) == [pod_path("hi") + "/status", pod_path("v") + "/status"]
    assert pod_path("v") in c.client.objects


def test_a_conflicting_delete_is_done_and_other_errors_propagate():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    original = c.client.request

    def refuse_delete(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "DELETE":
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
        return original(method, path, **kw)

    c.client.request = refuse_delete  # type: ignore[method-assign]
    assert c.preemptor().sweep().result == "preempted"

    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    original = c.client.request

    def fail_delete(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "DELETE":
            raise ApiError(500, "InternalError", "etcd is away")
        return original(method, path, **kw)

    c.client.request = fail_delete  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        c.preemptor().sweep()


def test_only_the_leader_writes():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    c.leader = False
    with pytest.raises(NotLeader):
        c.preemptor().sweep()
    assert c.client.writes == []
