"""controller/gang_preemptor.py against an in-memory API server: the order of its writes (the
record first, then each victim's condition and uid-preconditioned DELETE, the members'
nominations, the record marked applied), resuming an unapplied record, and stopping when
leadership is lost. The caches are real WatchCaches fed directly; no server runs."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from controller.caches import Caches
from controller.events import EventRecorder
from controller.gang_preemptor import MERGE_PATCH, STRATEGIC_PATCH, GangPreemptor, NotLeader
from controller.reconcile import Reconciler
from priogate import phase
from priogate import preemption_record as record
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.preemption_record import RecordedDecision, Victim
from tests.builders import node, pod, podgroup, priority_class

NS = "default"
GROUP_PATH = resource_path(GROUP_VERSION, PLURAL, NS, "gang")
EVENTS_PATH = resource_path("events.k8s.io/v1", "events", NS)


def pod_path(name: str) -> str:
    return resource_path("v1", "pods", NS, name)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any
    content_type: str


class FakeApiClient(ApiClient):
    """The API server's answers to the preemptor's requests, on objects kept by path; every
    request is recorded. A PATCH of an object honours metadata.resourceVersion as a
    precondition (409) and merges annotations; a status PATCH merges conditions by type, as a
    strategic merge does; DELETE honours a uid precondition (409) and answers 404 for what is
    gone."""

    def __init__(self, objects: Mapping[str, Mapping[str, Any]]) -> None:
        self.objects: dict[str, dict[str, Any]] = {
            path: copy.deepcopy(dict(o)) for path, o in objects.items()
        }
        self.calls: list[Call] = []
        self._version = 100

    @property
    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.method != "GET"]

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: Any = 30,
    ) -> dict[str, Any]:
        call = Call(method, path, copy.deepcopy(body), content_type)
        self.calls.append(call)
        if method == "POST":
            return copy.deepcopy(body)
        target = path.removesuffix("/status")
        current = self.objects.get(target)
        if current is None:
            raise ApiError(404, "NotFound", f"{target} not found")
        if method == "GET":
            return copy.deepcopy(current)
        if method == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            if uid is not None and uid != current["metadata"].get("uid"):
                raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
            del self.objects[target]
            return {"kind": "Status", "status": "Success"}
        if method == "PATCH" and path.endswith("/status"):
            status = current.setdefault("status", {})
            for key, value in body["status"].items():
                if key == "conditions":
                    kept = [
                        c for c in status.get("conditions", []) if c["type"] not in {v["type"] for v in value}
                    ]
                    status["conditions"] = kept + value
                else:
                    status[key] = value
            return copy.deepcopy(current)
        if method == "PATCH":
            meta = body.get("metadata") or {}
            if (
                "resourceVersion" in meta
                and meta["resourceVersion"] != current["metadata"]["resourceVersion"]
            ):
                raise ApiError(409, "Conflict", "the object has been modified")
            current["metadata"].setdefault("annotations", {}).update(meta.get("annotations") or {})
        elif method == "PUT":
            current.clear()
            current.update(copy.deepcopy(body))
        self._version += 1
        current["metadata"]["resourceVersion"] = str(self._version)
        return copy.deepcopy(current)


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
    client: FakeApiClient
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
    client = FakeApiClient({GROUP_PATH: group, **{pod_path(p["metadata"]["name"]): p for p in pods}})
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
        ("EVENT", "Preempted low1"),
        ("DELETE", pod_path("low1")),
        ("PATCH", pod_path("low2") + "/status"),
        ("EVENT", "Preempted low2"),
        ("DELETE", pod_path("low2")),
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
        "earlier", 1.0, (Victim(NS, "low2", "uid-low2", "n1"),), {"g0": "n1"}, "recorded earlier"
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
        ("EVENT", "Preempted low1"),
        ("DELETE", pod_path("low1")),
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
        ("EVENT", "Preempted low2"),
        ("DELETE", pod_path("low2")),
        ("PATCH", pod_path("g0") + "/status"),
        ("PATCH", GROUP_PATH),
        ("EVENT", "Preempted gang"),
    ]
    assert c.recorded() == decision.done()


def test_a_victim_replaced_by_a_new_pod_of_the_same_name_is_spared():
    earlier = RecordedDecision(
        "earlier", 1.0, (Victim(NS, "low1", "uid-old", "n1"),), {"g0": "n1"}, "recorded earlier"
    )
    c = cluster(gang_group(earlier))
    assert c.handle(c.preemptor()) == "resumed"
    # the cached pod has another uid: no condition; the DELETE's uid precondition fails (409)
    assert [w.method for w in c.client.writes if w.path.startswith(pod_path("low1"))] == ["DELETE"]
    assert pod_path("low1") in c.client.objects
    assert c.recorded() == earlier.done()


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
