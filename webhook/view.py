"""The ClusterView rule sets read, over watch-backed caches. Derived values (the current
globalDefault class, per-namespace reservations and their consumption) are computed once per
cache change, not per request."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from priogate import podgroup, priority
from priogate.kube.cache import WatchCache
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger import LEDGER_LABEL, LEDGER_NAME, Entry, entries_of
from priogate.quota import quota_names
from priogate.resources import ResourceList, add, pod_requests


def group_member_essentials(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What the pod quota check reads of a pod: nothing unless it belongs to a PodGroup (only
    members draw on reservations), else its identity, group link, requests and phase. The
    pods cache of a large cluster then holds the gang members alone, a few hundred bytes each."""
    if not podgroup.group_of(pod):
        return None
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    slim_meta = {
        k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if k in meta
    }
    if podgroup.GROUP_ANNOTATION in annotations:
        slim_meta["annotations"] = {podgroup.GROUP_ANNOTATION: annotations[podgroup.GROUP_ANNOTATION]}
    if podgroup.GROUP_LABEL in labels:
        slim_meta["labels"] = {podgroup.GROUP_LABEL: labels[podgroup.GROUP_LABEL]}
    slim_spec: dict[str, Any] = {}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            slim_spec[key] = [
                {k: c[k] for k in ("name", "resources", "restartPolicy") if k in c}
                if isinstance(c, Mapping)
                else c
                for c in spec[key]
            ]
    if "overhead" in spec:
        slim_spec["overhead"] = spec["overhead"]
    return {
        "metadata": slim_meta,
        "spec": slim_spec,
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


@dataclass(frozen=True)
class CacheSource:
    path: str
    selectors: tuple[tuple[str, str], ...] = ()
    transform: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None


# Where each cache lists and watches; a server starts only the ones its rule sets need.
CACHE_SOURCES: dict[str, CacheSource] = {
    "priorityclasses": CacheSource("/apis/scheduling.k8s.io/v1/priorityclasses"),
    "resourcequotas": CacheSource("/api/v1/resourcequotas"),
    "podgroups": CacheSource(f"/apis/{podgroup.GROUP_VERSION}/{podgroup.PLURAL}"),
    "ledgers": CacheSource("/api/v1/configmaps", (("labelSelector", "=".join(LEDGER_LABEL)),)),
    # Terminated pods use no quota; only PodGroup members matter, and only a few of their fields.
    "pods": CacheSource(
        "/api/v1/pods",
        (("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed"),),
        group_member_essentials,
    ),
}


@dataclass(frozen=True)
class NamespaceReservations:
    entries: dict[str, Entry]
    consumed_by_group: dict[str, ResourceList]  # group name -> quota-named usage of its pods


class CacheView:
    def __init__(self, caches: Mapping[str, WatchCache], ledger_store: LedgerStore | None = None) -> None:
        self.caches = caches
        self.ledger_store = ledger_store
        self._default_memo: tuple[int, Mapping | None] | None = None
        self._reservations_memo: dict[str, tuple[tuple[int, int], NamespaceReservations]] = {}

    def unsynced(self, names: tuple[str, ...] | list[str]) -> list[str]:
        return [n for n in names if n not in self.caches or not self.caches[n].synced]

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
