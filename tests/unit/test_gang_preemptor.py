"""controller/gang_preemptor.py against an in-memory API server: the order of its writes (the
record first, then each victim's condition and uid-preconditioned DELETE, the members'
nominations, the record marked applied), resuming an unapplied record, and stopping when
leadership is lost. The caches are real WatchCaches fed directly; no server runs."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from controller.caches import Caches
from controller.events import EventRecorder
from controller.gang_preemptor import GangPreemptor, NotLeader
from controller.reconcile import Reconciler
from controller.victims import MERGE_PATCH, STRATEGIC_PATCH
from priogate import phase
from priogate import preemption_record as record
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption_record import RecordedDecision, Victim
from tests.builders import node, pod, podgroup, priority_class
from tests.fake_api import Call, FakeApi

SOFT = PreemptionPolicy(opt_out_mode="soft")

NS = "default"
GROUP_PATH = resource_path(GROUP_VERSION, PLURAL, NS, "gang")
EVENTS_PATH = resource_path("events.k8s.io/v1", "events", NS)


def pod_path(name: str) -> str:
    return resource_path("v1", "pods", NS, name)


# ---- the cluster: one full node, two low-priority victims, a gang of one that needs the node ----


def running(name: str, start: float) -> dict:
    obj = pod(name, priority=1, cpu="2", node="n1", started=start)
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def member(name: str) -> dict:
    obj = pod(name, cpu="4", priority_class="high", group="gang", phase="Pending")
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]  # the scheduler tried: needs_preemption's condition
    return obj


def gang_group(decision: RecordedDecision | None = None) -> dict:
    obj = podgroup("gang", min_member=1, priority_class="high", phase="Inqueue")
    obj["metadata"].update(uid="uid-gang", resourceVersion="7")
    if decision is not None:
        obj["metadata"]["annotations"] = {record.ANNOTATION: decision.to_annotation()}
    return obj


@dataclass
class Cluster:
    client: FakeApi
    caches: Caches

    def preemptor(self, is_leader: Callable[[], bool] = lambda: True) -> GangPreemptor:
        return GangPreemptor(self.client, self.caches, EventRecorder(self.client, "test"), is_leader)

    def handle(self, preemptor: GangPreemptor) -> str:
        group = self.caches.podgroups.get(NS, "gang")
        assert group is not None
        members = [
            p for p in self.caches.pods.namespace(NS).values() if p["metadata"]["name"].startswith("g")
        ]
        return preemptor.handle(group, members, phase.count_members(members).scheduled)

    def recorded(self) -> RecordedDecision | None:
        return record.recorded(self.client.objects[GROUP_PATH])

    def watch_deleted(self) -> None:
        """What the pods watch would deliver: the server's deletions reach the cache."""
        for obj in self.caches.pods.items():
            if pod_path(obj["metadata"]["name"]) not in self.client.objects:
                self.caches.pods.apply_event("DELETED", obj)


def cluster(group: dict | None = None) -> Cluster:
    group = group or gang_group()
    pods = [running("low1", 0), running("low2", 10), member("g0")]
    client = FakeApi({GROUP_PATH: group, **{pod_path(p["metadata"]["name"]): p for p in pods}})
    caches = Caches(
        podgroups=WatchCache.static("podgroups", [copy.deepcopy(group)]),  # type: ignore[arg-type]
        pods=WatchCache.static("pods", copy.deepcopy(pods)),  # type: ignore[arg-type]
        quotas=WatchCache.static("quotas", []),  # type: ignore[arg-type]
        nodes=WatchCache.static("nodes", [node("n1", cpu="4")]),  # type: ignore[arg-type]
        ledgers=WatchCache.static("ledgers", []),  # type: ignore[arg-type]
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", [priority_class("high", value=100)]),
    )
    return Cluster(client, caches)


def summary(calls: list[Call]) -> list[tuple[str, str]]:
    """(method, path) with event creations reduced to their reason."""
    return [
        ("EVENT", c.body["reason"] + " " + c.body["regarding"]["name"])
        if c.path == EVENTS_PATH
        else (c.method, c.path)
        for c in calls
    ]


def annotation_of(call: Call) -> RecordedDecision:
    return RecordedDecision.from_annotation(call.body["metadata"]["annotations"][record.ANNOTATION])


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


def unapplied(victims: tuple[Victim, ...], decided_at: float | None = None) -> RecordedDecision:
    at = time.time() - 5 if decided_at is None else decided_at
    return RecordedDecision("forged", at, victims, {"g0": "n1"}, "written by someone")


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
        ("record too old", unapplied((LOW1,), decided_at=time.time() - 3600), None, "low1", "old, more than"),
        ("record from the future", unapplied((LOW1,), decided_at=time.time() + 3600), None, "low1", "future"),
        (
            "uid differs",
            unapplied((Victim(NS, "low1", "uid-other", "n1"),)),
            None,
            "low1",
            "not the recorded pod",
        ),
        (
            "victim of equal priority",
            unapplied((Victim(NS, "peer", "uid-peer", "n1"),)),
            protected_pod("peer", priority=100),
            "peer",
            "not lower than the PodGroup's 100",
        ),
        (
            "victim of higher priority (a kube-system pod)",
            unapplied((Victim("kube-system", "etcd", "uid-etcd", "n1"),)),
            None,
            "",
            "",
        ),
        (
            "DaemonSet pod",
            unapplied((Victim(NS, "ds", "uid-ds", "n1"),)),
            protected_pod(
                "ds",
                ownerReferences=[{"kind": "DaemonSet", "name": "d", "uid": "x", "apiVersion": "apps/v1"}],
            ),
            "ds",
            "a DaemonSet pod",
        ),
        (
            "mirror pod",
            unapplied((Victim(NS, "static", "uid-static", "n1"),)),
            protected_pod("static", annotations={"kubernetes.io/config.mirror": "x"}),
            "static",
            "a mirror pod",
        ),
        (
            "opted out (hard mode)",
            unapplied((Victim(NS, "shy", "uid-shy", "n1"),)),
            protected_pod("shy", labels={"priogate.io/allow-preemption": "false"}),
            "shy",
            "opted out",
        ),
    ],
)
def test_a_recorded_decision_failing_a_recheck_is_stopped(case, decision, extra_pod, victim_name, why):
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
