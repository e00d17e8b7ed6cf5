"""The controller's watch-backed view of the cluster, and the events that feed its work queue.

The controller needs each object that changed (a pod event enqueues its PodGroup), so the caches
whose changes need work call back per object; the rest are only read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from priogate.kube import catalogue
from priogate.kube.cache import DEFAULT_QUIET_SECONDS, Obj, OnEvent, WatchCache
from priogate.kube.client import ApiClient
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE
from priogate.slim import namespace_labels, slim_node, slim_pod


@dataclass
class Caches:
    podgroups: WatchCache
    pods: WatchCache
    quotas: WatchCache
    nodes: WatchCache
    ledgers: WatchCache
    pdbs: WatchCache
    classes: WatchCache
    # For the enrolment label (controller/enrol.py); None where a test needs no enrolment.
    namespaces: WatchCache | None = None

    def all(self) -> list[WatchCache]:
        caches = [self.podgroups, self.pods, self.quotas, self.nodes, self.ledgers, self.pdbs, self.classes]
        return caches + ([self.namespaces] if self.namespaces is not None else [])

    def start(self) -> None:
        for cache in self.all():
            cache.start()

    def stop(self) -> None:
        for cache in self.all():
            cache.stop()

    def synced(self) -> bool:
        """Every cache current: listed, and not stale."""
        return all(cache.synced for cache in self.all())

    def listed(self) -> bool:
        """Every cache listed once (current or stale): the process is up and working."""
        return all(cache.listed for cache in self.all())

    def not_current(self) -> list[str]:
        """Why each cache that is not current is not: "name: reason"."""
        return [f"{c.name}: {c.state().reason}" for c in self.all() if not c.synced]

    def wait_synced(self, timeout: float) -> bool:
        return all(cache.wait_synced(timeout) for cache in self.all())


def build_caches(
    client: ApiClient,
    on_event: Callable[[str, str, Obj], None],
    ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE,
    quiet_seconds: float = DEFAULT_QUIET_SECONDS,
) -> Caches:
    """`on_event(cache field, event type, object)` for the caches whose changes need work."""

    def route(name: str) -> OnEvent:
        return lambda event_type, obj: on_event(name, event_type, obj)

    q = quiet_seconds
    # Every pod and node, without the fields the controller never reads.
    return Caches(
        podgroups=catalogue.PODGROUPS.cache(client, on_event=route("podgroups"), quiet_seconds=q),
        pods=catalogue.PODS.cache(client, transform=slim_pod, on_event=route("pods"), quiet_seconds=q),
        quotas=catalogue.RESOURCE_QUOTAS.cache(client, on_event=route("quotas"), quiet_seconds=q),
        nodes=catalogue.NODES.cache(client, transform=slim_node, on_event=route("nodes"), quiet_seconds=q),
        ledgers=catalogue.ledgers(ledger_namespace).cache(client, on_event=route("ledgers"), quiet_seconds=q),
        pdbs=catalogue.PDBS.cache(client, quiet_seconds=q),
        classes=catalogue.PRIORITY_CLASSES.cache(client, on_event=route("classes"), quiet_seconds=q),
        namespaces=catalogue.NAMESPACES.cache(
            client, transform=namespace_labels, on_event=route("namespaces"), quiet_seconds=q
        ),
    )
