"""The preempt extender's test cluster: pods and nodes on the in-memory API server
(tests/fake_api.py), real WatchCaches fed directly, and the extender over them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.caches import Caches
from controller.engine_state import EngineState
from controller.events import EventRecorder
from controller.extender import PreemptExtender
from priogate.kube.cache import WatchCache
from priogate.kube.client import resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from tests.builders import node, pod, priority_class
from tests.fake_api import FakeApi
from tests.unit.gang_cluster import EVENTS_PATH, NS, pod_path

UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def running(name: str, priority: int, cpu: str = "2", node_name: str = "n1", start: float = 0) -> dict:
    obj = pod(name, priority=priority, cpu=cpu, node=node_name, started=start)
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def pending(
    name: str, priority: int, cpu: str = "4", created: float = 0, tried: bool = True, **kw: Any
) -> dict:
    obj = pod(name, priority=priority, cpu=cpu, phase="Pending", created=created, **kw)
    obj["metadata"]["uid"] = f"uid-{name}"
    if tried:
        obj["status"].setdefault("conditions", []).append(dict(UNSCHEDULABLE))
    return obj


@dataclass
class Cluster:
    client: FakeApi
    caches: Caches
    leader: bool = True

    def extender(
        self, clock: Callable[[], float] = lambda: 0.0, policy: PreemptionPolicy = DEFAULT_POLICY
    ) -> PreemptExtender:
        return PreemptExtender(
            self.client,
            self.caches,
            EngineState(self.caches),
            EventRecorder(self.client, "test"),
            lambda: self.leader,
            policy,
            clock=clock,
        )

    def events(self) -> list[dict[str, Any]]:
        return [c.body for c in self.client.writes if c.path == EVENTS_PATH]

    def sync_pods(self) -> None:
        """What the pods watch would deliver: the server's pods, replacing the cache's."""
        for obj in self.caches.pods.items():
            if pod_path(obj["metadata"]["name"]) not in self.client.objects:
                self.caches.pods.apply_event("DELETED", obj)
        for path, obj in self.client.objects.items():
            if path.startswith(resource_path("v1", "pods", NS)):
                self.caches.pods.apply_event("MODIFIED", copy.deepcopy(obj))


def cluster(*pods: dict, nodes: tuple[dict, ...] = (), groups: tuple[dict, ...] = ()) -> Cluster:
    nodes = nodes or (node("n1", cpu="4"),)
    objects = {pod_path(p["metadata"]["name"]): p for p in pods}
    objects.update({resource_path(GROUP_VERSION, PLURAL, NS, g["metadata"]["name"]): g for g in groups})
    client = FakeApi(objects)
    caches = Caches(
        podgroups=WatchCache.static("podgroups", copy.deepcopy(list(groups))),
        pods=WatchCache.static("pods", copy.deepcopy(list(pods))),
        quotas=WatchCache.static("quotas", []),
        nodes=WatchCache.static("nodes", list(nodes)),
        ledgers=WatchCache.static("ledgers", []),
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", [priority_class("high", value=100)]),
    )
    return Cluster(client, caches)
