"""The gang preemptor's test cluster: one full node, two low-priority victims and a gang of one
that needs the node, on the in-memory API server (tests/fake_api.py) with real WatchCaches fed
directly. Shared by the gang preemptor's tests and the pod preemptor's."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from controller.caches import Caches
from controller.events import EventRecorder
from controller.gang_preemptor import GangPreemptor
from priogate import phase
from priogate import preemption_record as record
from priogate.kube.cache import WatchCache
from priogate.kube.client import resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption_record import RecordedDecision
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
