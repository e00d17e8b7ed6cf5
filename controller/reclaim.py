"""Reservation reclaim: remove ledger entries whose PodGroup never got stored or is gone.

priogate/ledger.stale_entries decides; priogate/kube/ledger_store.LedgerStore writes with the
resourceVersion read and decides again on a 409, so a reservation the webhook adds meanwhile is
never lost. The cache only tells which namespaces may have something to reclaim, so a sweep
with nothing stale costs no API call; what is removed is decided on a quorum LIST of the
namespace's PodGroups (ApiClient.list_all), never on the cache: a cache that is behind, or was
emptied, must not free a live group's reservation. A LIST that fails reclaims nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

import structlog

from controller.caches import Caches
from priogate.kube.client import ApiClient, resource_path
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger import DEFAULT_RECLAIM_GRACE, Entry, entries_of, stale_entries
from priogate.podgroup import GROUP_VERSION, PLURAL

log = structlog.get_logger("priogate.controller.reclaim")

# namespace -> uid -> name of its PodGroups, as etcd has them now
ListGroups = Callable[[str], dict[str, str]]


def quorum_groups(client: ApiClient) -> ListGroups:
    def list_groups(namespace: str) -> dict[str, str]:
        groups = client.list_all(resource_path(GROUP_VERSION, PLURAL, namespace))
        return {g["metadata"].get("uid", ""): g["metadata"]["name"] for g in groups}

    return list_groups


class Reclaimer:
    def __init__(
        self,
        store: LedgerStore,
        caches: Caches,
        grace: dt.timedelta = DEFAULT_RECLAIM_GRACE,
        *,
        list_groups: ListGroups,
    ) -> None:
        self.store = store
        self.caches = caches
        self.grace = grace
        self.list_groups = list_groups

    def namespaces(self) -> list[str]:
        return sorted({(c.get("metadata") or {}).get("namespace", "") for c in self.caches.ledgers.items()})

    def live_groups(self, namespace: str) -> dict[str, str]:
        return {
            g["metadata"].get("uid", ""): g["metadata"]["name"]
            for g in self.caches.podgroups.namespace(namespace).values()
        }

    def reclaim(self, namespace: str, now: dt.datetime | None = None) -> list[str]:
        """Keys of the entries removed from `namespace`'s ledger."""
        now = now or dt.datetime.now(dt.UTC)
        cached = [c for c in self.caches.ledgers.namespace(namespace).values()]
        try:
            if not cached or not stale_entries(
                entries_of(cached[0]), self.live_groups(namespace), now, self.grace
            ):
                return []
        except ValueError as e:
            log.warning("ledger unreadable; not reclaiming", namespace=namespace, error=str(e))
            return []
        try:
            live = self.list_groups(namespace)
        except Exception as e:
            log.warning("podgroup list failed; not reclaiming", namespace=namespace, error=repr(e))
            return []

        def drop_stale(entries: dict[str, Entry]) -> tuple[dict[str, Entry] | None, list[str]]:
            stale = stale_entries(entries, live, now, self.grace)
            if not stale:
                return None, []
            return {k: v for k, v in entries.items() if k not in stale}, stale

        removed = self.store.update(namespace, drop_stale)
        if removed:
            log.info(
                "reclaimed stale reservations",
                namespace=namespace,
                entries=removed,
                groups=_groups(cached[0], removed),
            )
        return removed


def _groups(ledger: Mapping[str, object], keys: list[str]) -> list[str]:
    entries = entries_of(ledger)  # type: ignore[arg-type]
    return [entries[k].group if k in entries else k for k in keys]
