"""The ClusterView rule sets read, over watch-backed caches. Derived values (the current
globalDefault class, per-namespace reservations and their consumption) are computed once per
cache change, not per request."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from priogate import podgroup, priority
from priogate.kube import catalogue
from priogate.kube.cache import Transform, WatchCache
from priogate.kube.catalogue import Source
from priogate.kube.client import ApiClient, resource_path
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger import LEDGER_NAME, Entry, entries_of
from priogate.quota import quota_names
from priogate.resources import ResourceList, add, pod_requests
from priogate.slim import group_member_essentials

# The caches a rule set may need (RuleSet.needs) by name, and what each keeps: of pods, only
# PodGroup members' essentials (only members draw on reservations).
CACHES: dict[str, tuple[Source, Transform | None]] = {
    source.name: (source, transform)
    for source, transform in (
        (catalogue.PRIORITY_CLASSES, None),
        (catalogue.RESOURCE_QUOTAS, None),
        (catalogue.PODGROUPS, None),
        (catalogue.LEDGERS, None),
        (catalogue.UNFINISHED_PODS, group_member_essentials),
    )
}


@dataclass(frozen=True)
class NamespaceReservations:
    entries: dict[str, Entry]
    consumed_by_group: dict[str, ResourceList]  # group name -> quota-named usage of its pods


class CacheView:
    def __init__(
        self,
        caches: Mapping[str, WatchCache],
        ledger_store: LedgerStore | None = None,
        client: ApiClient | None = None,
    ) -> None:
        self.caches = caches
        self.ledger_store = ledger_store
        # For the one read that is not a cache (listed_podgroups); None offline and in tests,
        # where the caches are fixed and so never behind.
        self.client = client
        self._default_memo: tuple[int, Mapping | None] | None = None
        self._reservations_memo: dict[str, tuple[tuple[int, int], NamespaceReservations]] = {}

    def unsynced(self, names: Sequence[str]) -> list[str]:
        """The caches of `names` that are not current: not listed yet, or stale."""
        return [n for n in names if n not in self.caches or not self.caches[n].synced]

    def unlisted(self, names: Sequence[str]) -> list[str]:
        """The caches of `names` that hold nothing yet (no LIST has succeeded)."""
        return [n for n in names if n not in self.caches or not self.caches[n].listed]

    def priority_classes(self) -> Mapping[str, Mapping]:
        return self.caches["priorityclasses"].namespace("")

    def default_priority_class(self) -> Mapping | None:
        cache = self.caches["priorityclasses"]
        memo = self._default_memo
        generation = cache.generation
        if memo is None or memo[0] != generation:
            memo = (generation, priority.current_default(cache.namespace("").values()))
            self._default_memo = memo
        return memo[1]

    def resource_quotas(self, namespace: str) -> list[Mapping[str, Any]]:
        return list(self.caches["resourcequotas"].namespace(namespace).values())

    def live_podgroups(self, namespace: str) -> dict[str, str]:
        """uid -> name of the namespace's stored PodGroups."""
        groups = self.caches["podgroups"].namespace(namespace).values()
        return {g["metadata"].get("uid", ""): g["metadata"]["name"] for g in groups}

    def listed_podgroups(self, namespace: str) -> dict[str, str]:
        """uid -> name of the namespace's PodGroups by a quorum LIST (ApiClient.list_all), not
        the cache: what a reservation is freed on. Raises when the API server cannot answer."""
        if self.client is None:
            return self.live_podgroups(namespace)
        path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace)
        groups = self.client.list_all(path, timeout=(3, 5))
        return {g["metadata"].get("uid", ""): g["metadata"]["name"] for g in groups}

    def reservations(self, namespace: str) -> NamespaceReservations:
        """The namespace's ledger entries (from the watch; admission of PodGroups reads the ledger
        fresh instead) and what each group's pods already use, in quota names."""
        ledgers, pods = self.caches["ledgers"], self.caches["pods"]
        key = (ledgers.namespace_generation(namespace), pods.namespace_generation(namespace))
        memo = self._reservations_memo.get(namespace)
        if memo is not None and memo[0] == key:
            return memo[1]
        consumed: dict[str, ResourceList] = {}
        for pod in pods.namespace(namespace).values():
            group = podgroup.group_of(pod)
            if group and not podgroup.is_terminal(pod):
                consumed[group] = add(consumed.get(group, {}), quota_names(pod_requests(pod), 1))
        value = NamespaceReservations(entries_of(ledgers.get(namespace, LEDGER_NAME)), consumed)
        self._reservations_memo[namespace] = (key, value)
        return value
