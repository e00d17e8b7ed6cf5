"""controller/gang_preemptor.py against an in-memory API server: the order of its writes (the
record first, then each victim's condition and uid-preconditioned DELETE, the members'
nominations, the record marked applied), resuming an unapplied record, stopping when
leadership is lost, and one preemptor per pod. The re-checks are in
test_gang_preemptor_rechecks.py."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

import pytest

from controller.gang_preemptor import NotLeader
from controller.reconcile import Reconciler
from controller.victims import MERGE_PATCH, STRATEGIC_PATCH
from priogate import preemption_record as record
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError
from priogate.preemption_record import RecordedDecision, Victim
from tests.unit.gang_cluster import (
    GROUP_PATH,
    NS,
    annotation_of,
    cluster,
    gang_group,
    member,
    pod_path,
    summary,
)

# ---- a new decision ---------------------------------------------------------------------------


def test_the_decision_is_recorded_before_any_victim_is_touched():
    c = cluster()
    assert c.handle(c.preemptor()) == "preempted"
    first = c.client.writes[0]
    assert (first.method, first.path, first.content_type) == ("PATCH", GROUP_PATH, MERGE_PATCH)
    assert first.body["metadata"]["resourceVersion"] == "7"  # the precondition: the group as read
    decision = annotation_of(first)
    assert not decision.applied
    assert [(v.key, v.uid, v.node) for v in decision.victims] == [
        ("default/low1", "uid-low1", "n1"),
        ("default/low2", "uid-low2", "n1"),
    ]
    assert decision.placements == {"g0": "n1"}


def test_the_writes_in_order():
    c = cluster()
    c.handle(c.preemptor())
    assert summary(c.client.writes) == [
        ("PATCH", GROUP_PATH),  # the record: the commit point
        ("PATCH", pod_path("low1") + "/status"),
        ("DELETE", pod_path("low1")),
        ("EVENT", "Preempted low1"),
        ("PATCH", pod_path("low2") + "/status"),
        ("DELETE", pod_path("low2")),
        ("EVENT", "Preempted low2"),
        ("PATCH", pod_path("g0") + "/status"),
        ("PATCH", GROUP_PATH),  # marked applied
        ("EVENT", "Preempted gang"),
    ]


def test_each_victim_gets_a_disruption_target_condition_and_a_uid_preconditioned_delete():
    c = cluster()
    c.handle(c.preemptor())
    for name in ("low1", "low2"):
        (patch,) = [w for w in c.client.writes if w.path == pod_path(name) + "/status"]
        assert patch.content_type == STRATEGIC_PATCH  # conditions merge by type: others' stay
        (condition,) = patch.body["status"]["conditions"]
        assert condition["type"] == "DisruptionTarget" and condition["status"] == "True"
        assert condition["reason"] == record.CONDITION_REASON
        assert "default/gang" in condition["message"]
        (delete,) = [w for w in c.client.writes if w.method == "DELETE" and w.path == pod_path(name)]
        assert delete.body["preconditions"] == {"uid": f"uid-{name}"}
        assert pod_path(name) not in c.client.objects


def test_members_are_nominated_to_their_nodes():
    c = cluster()
    c.handle(c.preemptor())
    (nomination,) = [w for w in c.client.writes if w.path == pod_path("g0") + "/status"]
    assert nomination.content_type == MERGE_PATCH
    assert nomination.body == {"status": {"nominatedNodeName": "n1"}}
    assert c.client.objects[pod_path("g0")]["status"]["nominatedNodeName"] == "n1"


def test_the_record_is_marked_applied():
    c = cluster()
    c.handle(c.preemptor())
    first, last = [w for w in c.client.writes if w.path == GROUP_PATH]
    assert annotation_of(last) == annotation_of(first).done()
    # the mark is written against the group as the server has it now, not the cached one
    assert last.body["metadata"]["resourceVersion"] != first.body["metadata"]["resourceVersion"]
    stored = c.recorded()
    assert stored is not None and stored.applied and stored.id == annotation_of(first).id
    cached = record.recorded(c.caches.podgroups.get(NS, "gang") or {})
    assert cached == stored  # the preemptor's own writes reach its cache at once


def test_a_conflicting_record_write_touches_nothing():
    c = cluster()
    c.client.objects[GROUP_PATH]["metadata"]["resourceVersion"] = "8"  # changed since the cache read it
    with pytest.raises(ApiError) as raised:
        c.handle(c.preemptor())
    assert raised.value.status == 409
    assert summary(c.client.writes) == [("PATCH", GROUP_PATH)]
    assert c.recorded() is None


def test_an_applied_record_with_victims_still_present_waits():
    c = cluster()
    c.handle(c.preemptor())
    # the watch has not delivered the deletions yet: the victims are still in the cache
    c.client.calls.clear()
    assert c.handle(c.preemptor()) == "wait"
    assert c.client.writes == []


# ---- resuming a recorded decision ---------------------------------------------------------------


def test_an_unapplied_record_is_resumed_with_the_same_victims():
    # An earlier leader recorded low2 alone (the cluster has changed since): the new leader
    # finishes that decision and takes none of its own.
    earlier = RecordedDecision(
        "earlier", time.time() - 5, (Victim(NS, "low2", "uid-low2", "n1"),), {"g0": "n1"}, "recorded earlier"
    )
    c = cluster(gang_group(earlier))
    assert c.handle(c.preemptor()) == "resumed"
    assert [w.path for w in c.client.writes if w.method == "DELETE"] == [pod_path("low2")]
    assert pod_path("low1") in c.client.objects
    marks = [annotation_of(w) for w in c.client.writes if w.path == GROUP_PATH]
    assert marks == [earlier.done()]  # no new record: only the old one, marked applied
    assert c.recorded() == earlier.done()


def test_leadership_lost_mid_way_stops_the_writes_and_the_next_leader_finishes():
    c = cluster()
    guards = iter([True, True, True])  # the record, low1's condition, low1's DELETE
    with pytest.raises(NotLeader):
        c.handle(c.preemptor(lambda: next(guards, False)))
    assert summary(c.client.writes) == [
        ("PATCH", GROUP_PATH),
        ("PATCH", pod_path("low1") + "/status"),
        ("DELETE", pod_path("low1")),
        ("EVENT", "Preempted low1"),
    ]
    decision = c.recorded()
    assert decision is not None and not decision.applied
    assert pod_path("low2") in c.client.objects and "nominatedNodeName" not in c.client.objects[
        pod_path("g0")
    ].get("status", {})

    c.watch_deleted()
    c.client.calls.clear()
    assert c.handle(c.preemptor()) == "resumed"
    assert summary(c.client.writes) == [
        ("DELETE", pod_path("low1")),  # gone already (404): harmless to repeat
        ("PATCH", pod_path("low2") + "/status"),
        ("DELETE", pod_path("low2")),
        ("EVENT", "Preempted low2"),
        ("PATCH", pod_path("g0") + "/status"),
        ("PATCH", GROUP_PATH),
        ("EVENT", "Preempted gang"),
    ]
    assert c.recorded() == decision.done()


def test_a_victim_replaced_by_a_new_pod_of_the_same_name_stops_the_decision():
    # The record names low1 with another uid: the pod there now is not the recorded one.
    earlier = RecordedDecision(
        "earlier", time.time() - 5, (Victim(NS, "low1", "uid-old", "n1"),), {"g0": "n1"}, "recorded earlier"
    )
    c = cluster(gang_group(earlier))
    assert c.handle(c.preemptor()) == "refused"
    assert not [w for w in c.client.writes if w.path.startswith(pod_path("low1"))]
    assert pod_path("low1") in c.client.objects
    stored = c.recorded()
    assert stored is not None and stored.applied and "not the recorded pod" in stored.stopped


def test_the_disruption_target_patch_carries_the_uid_and_a_replaced_pod_is_not_deleted():
    c = cluster()
    preemptor = c.preemptor()
    # low1 is replaced on the server after the cache read it: the uid in the status PATCH
    # (a precondition) makes the server refuse it, and no DELETE follows.
    c.client.objects[pod_path("low1")]["metadata"]["uid"] = "uid-new"
    assert c.handle(preemptor) == "preempted"
    patch = next(w for w in c.client.calls if w.path == pod_path("low1") + "/status")
    assert patch.body["metadata"] == {"uid": "uid-low1"}
    assert not [w for w in c.client.writes if w.method == "DELETE" and w.path == pod_path("low1")]
    assert pod_path("low1") in c.client.objects


# ---- through the reconciler ---------------------------------------------------------------------


class CountingCache(WatchCache):
    """Counts reads of one namespace's objects."""

    reads = 0

    def namespace(self, namespace: str) -> Mapping[str, Any]:
        self.reads += 1
        return super().namespace(namespace)


def test_a_reconcile_reads_the_groups_members_once_and_preempts():
    c = cluster()
    pods = CountingCache.static("pods", [copy.deepcopy(p) for p in c.caches.pods.items()])
    assert isinstance(pods, CountingCache)
    c.caches.pods = pods  # type: ignore[assignment]
    reconciler = Reconciler(c.client, c.caches, c.preemptor())
    assert reconciler.reconcile(NS, "gang") == "preempted"
    assert pods.reads == 1
    assert [w.method for w in c.client.writes if w.method == "DELETE"] == ["DELETE", "DELETE"]


# ---- one preemptor per pod -------------------------------------------------------------------------


def test_no_gang_decision_while_kube_scheduler_nominated_a_member():
    c = cluster()
    g0 = copy.deepcopy(c.caches.pods.get(NS, "g0"))
    assert g0 is not None
    g0["status"]["nominatedNodeName"] = "n1"  # kube-scheduler's PostFilter preempting for it
    c.caches.pods.apply_event("MODIFIED", g0)
    assert c.handle(c.preemptor()) == "foreign-nomination"
    assert c.client.writes == []


def test_our_own_nomination_does_not_block_the_next_decision():
    done = RecordedDecision("ours", time.time() - 3600, (), {"g0": "n1"}, "ours").done()
    assert record.foreign_nomination([], done) == ""
    member_ = member("g0")
    member_["status"]["nominatedNodeName"] = "n1"
    assert record.foreign_nomination([member_], done) == ""
    assert record.foreign_nomination([member_], None) == "g0"
    member_["status"]["nominatedNodeName"] = "n2"
    assert record.foreign_nomination([member_], done) == "g0"
    assert record.foreign_nomination([member_], done.stop("x")) == "g0"


# ---- a constraint the engine does not model ---------------------------------------------------


def test_an_unmodelled_constraint_is_refused_with_one_warning_event():
    """A member's anti-affinity over a topology key gang preemption does not model: no record,
    no victim, and one Warning Event on the PodGroup naming the member and the key, however
    often the group is reconciled."""
    c = cluster()
    g0 = copy.deepcopy(c.caches.pods.get(NS, "g0"))
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "example.com/rack"}
    g0["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    c.caches.pods.apply_event("MODIFIED", g0)
    preemptor = c.preemptor()
    assert c.handle(preemptor) == "refused"
    assert c.handle(preemptor) == "refused"
    assert summary(c.client.writes) == [("EVENT", "PreemptionRefused gang")]
    (event,) = [w for w in c.client.writes]
    assert event.body["type"] == "Warning"
    assert "member default/g0" in event.body["note"] and "example.com/rack" in event.body["note"]
    assert c.recorded() is None
    assert pod_path("low1") in c.client.objects and pod_path("low2") in c.client.objects
