"""The controller's watch-backed view of the cluster, and the events that feed its work queue.

The controller needs each object that changed (a pod event enqueues its PodGroup), so the caches
whose changes need work call back per object; the rest are only read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from priogate.kube import catalogue
from priogate.kube.cache import Obj, OnEvent, WatchCache
from priogate.kube.client import ApiClient
from priogate.ledger import DEFAULT_LEDGER_NAMESPACE
from priogate.slim import slim_node, slim_pod


@dataclass
class Caches:
    podgroups: WatchCache
    pods: WatchCache
    quotas: WatchCache
    nodes: WatchCache
    ledgers: WatchCache
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


def build_caches(
    client: ApiClient,
    on_event: Callable[[str, str, Obj], None],
    ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE,
) -> Caches:
    """`on_event(cache field, event type, object)` for the caches whose changes need work."""

    def route(name: str) -> OnEvent:
        return lambda event_type, obj: on_event(name, event_type, obj)

    # Every pod and node, without the fields the controller never reads.
    return Caches(
        podgroups=catalogue.PODGROUPS.cache(client, on_event=route("podgroups")),
        pods=catalogue.PODS.cache(client, transform=slim_pod, on_event=route("pods")),
        quotas=catalogue.RESOURCE_QUOTAS.cache(client, on_event=route("quotas")),
        nodes=catalogue.NODES.cache(client, transform=slim_node, on_event=route("nodes")),
        ledgers=catalogue.ledgers(ledger_namespace).cache(client, on_event=route("ledgers")),
        pdbs=catalogue.PDBS.cache(client),
        classes=catalogue.PRIORITY_CLASSES.cache(client),
    )
