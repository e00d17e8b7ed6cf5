"""The controller's watch-backed view of the cluster, and the events that feed its work queue.

priogate/kube/cache.WatchCache calls back per change of the whole cache; the controller needs
each object that changed (a pod event enqueues its PodGroup), so EventCache adds a per-object
callback around the same list/watch machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from priogate.kube.cache import Obj, WatchCache
from priogate.kube.client import ApiClient, resource_path
from priogate.ledger import LEDGER_LABEL
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.slim import slim_node, slim_pod

# (event type, object): "ADDED", "MODIFIED", "DELETED", or "SYNC" for every object of a relist.
OnEvent = Callable[[str, Obj], None]


class EventCache(WatchCache):
    def __init__(self, client: ApiClient, path: str, name: str, on_event: OnEvent, **kw: Any) -> None:
        super().__init__(client, path, name, **kw)
        self.on_event = on_event

    def apply_event(self, event_type: str, obj: Obj) -> None:
        super().apply_event(event_type, obj)
        if event_type != "BOOKMARK":
            self.on_event(event_type, obj)

    def replace_all(self, objects: list[Obj], resource_version: str) -> None:
        before = self.items()
        super().replace_all(objects, resource_version)
        seen = {_key(obj) for obj in objects}
        for obj in before:  # deleted while the watch was down: a relist is the only news of it
            if _key(obj) not in seen:
                self.on_event("DELETED", obj)
        for obj in objects:
            self.on_event("SYNC", obj)


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


@dataclass
class Caches:
    podgroups: EventCache
    pods: EventCache
    quotas: EventCache
    nodes: EventCache
    ledgers: EventCache
    pdbs: WatchCache
    classes: WatchCache

    def all(self) -> list[WatchCache]:
        return [self.podgroups, self.pods, self.quotas, self.nodes, self.ledgers, self.pdbs, self.classes]

    def start(self) -> None:
        for cache in self.all():
            cache.start()

    def stop(self) -> None:
        for cache in self.all():
            cache.stop()

    def synced(self) -> bool:
        return all(cache.synced for cache in self.all())

    def wait_synced(self, timeout: float) -> bool:
        return all(cache.wait_synced(timeout) for cache in self.all())


def build_caches(client: ApiClient, on_event: Callable[[str, str, Obj], None]) -> Caches:
    """`on_event(cache name, event type, object)` for the caches whose changes need work."""

    def route(name: str) -> OnEvent:
        return lambda event_type, obj: on_event(name, event_type, obj)

    return Caches(
        podgroups=EventCache(client, resource_path(GROUP_VERSION, PLURAL), "podgroups", route("podgroups")),
        pods=EventCache(client, resource_path("v1", "pods"), "pods", route("pods"), transform=slim_pod),
        quotas=EventCache(client, resource_path("v1", "resourcequotas"), "resourcequotas", route("quotas")),
        nodes=EventCache(client, resource_path("v1", "nodes"), "nodes", route("nodes"), transform=slim_node),
        ledgers=EventCache(
            client,
            resource_path("v1", "configmaps"),
            "ledgers",
            route("ledgers"),
            selectors=[("labelSelector", f"{LEDGER_LABEL[0]}={LEDGER_LABEL[1]}")],
        ),
        pdbs=WatchCache(client, resource_path("policy/v1", "poddisruptionbudgets"), "pdbs"),
        classes=WatchCache(
            client, resource_path("scheduling.k8s.io/v1", "priorityclasses"), "priorityclasses"
        ),
    )
