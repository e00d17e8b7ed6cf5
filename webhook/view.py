"""The ClusterView rule sets read, over watch-backed caches. Derived values (the current
globalDefault class, per-namespace reservations and their consumption) are computed once per
cache change, not per request."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from priogate import namespace_default, podgroup, priority
from priogate.class_users import Use
from priogate.kube import catalogue
from priogate.kube.cache import Transform, WatchCache, chained
from priogate.kube.catalogue import Source
from priogate.kube.class_users import class_uses, list_namespaces
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.kube.ledger_store import LedgerStore
from priogate.kube.namespaces import label_namespace, probe_refusal
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, ledger_name, ledger_of
from priogate.ledger.model import DamagedLedger, Entry, Ledger, Listing, stamp
from priogate.ledger.settlement import adopted
from priogate.ledger.stored_claims import StoredClaims, StoredGroups
from priogate.ledger.stored_groups import listing_of
from priogate.ledger.timing import IN_FLIGHT
from priogate.preemption.outcome import Outcome
from priogate.quota import quota_names
from priogate.resources import ResourceList, add, pod_requests
from priogate.slim import group_member_essentials, namespace_labels, slim_node, slim_pod
from webhook.ledger_relay import LedgerRelay
from webhook.loop import forbid_waiting
from webhook.preview_state import PREVIEW_CACHES, PreviewState


def sources(ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE) -> dict[str, tuple[Source, Transform | None]]:
    """The caches a rule set may need (RuleSet.needs) by name, and what each keeps: of pods,
    only PodGroup members' essentials (only members draw on reservations), and for the
    preemption preview every pod and node as the controller keeps them (what the engine reads);
    of ConfigMaps, only the ledgers in priogate's own namespace; of namespaces, their labels and
    default class."""
    return {
        source.name: (source, transform)
        for source, transform in (
            (catalogue.PRIORITY_CLASSES, None),
            (catalogue.RESOURCE_QUOTAS, None),
            (catalogue.PODGROUPS, None),
            (catalogue.ledgers(ledger_namespace), None),
            (catalogue.UNFINISHED_PODS, group_member_essentials),
            (catalogue.NAMESPACES, namespace_labels),
            (catalogue.PREEMPTION_PODS, slim_pod),
            (catalogue.NODES, slim_node),
            (catalogue.PDBS, None),
        )
    }


CACHES = sources()


@dataclass(frozen=True)
class NamespaceReservations:
    """A namespace's reservations as the caches show them: the cached ledger's entries plus a
    claim for every cached stored group the ledger lacks (`damaged`: the cached ledger did not
    parse, so only the stored groups are known), what each group's cached members use, the
    ledger's charges, and which groups are alive (uid -> being deleted)."""

    entries: dict[str, Entry]
    consumed_by_group: dict[str, ResourceList]  # group name -> quota-named usage of its pods
    live: Mapping[str, bool]
    member_uids: dict[str, bool]  # uids of cached (stored) member pods
    has_ledger: bool
    stored: Mapping[str, Entry]  # uid -> the cached stored group's claim
    damaged: bool = False


class CacheView:
    def __init__(
        self,
        caches: Mapping[str, WatchCache],
        ledger_store: Any = None,
        client: ApiClient | None = None,
        *,
        ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE,
        in_flight: dt.timedelta = IN_FLIGHT,
        preview: PreviewState | None = None,
    ) -> None:
        self.caches = caches
        # The preemption preview's engine state, where this server keeps its caches (the preview
        # server); built over static caches on first use otherwise (offline, tests).
        self._preview = preview
        self.ledger_store: LedgerStore | Any = ledger_store
        # Sends ledger admissions on to the namespace's writer (webhook/ledger_relay.py); None
        # when this server has no peer address.
        self.relay: LedgerRelay | None = None
        # For quorum reads outside a ledger's turn (listed_podgroups); None offline and in
        # tests, where the caches are fixed and so never behind.
        self.client = client
        self.ledger_namespace = ledger_namespace
        self.in_flight = in_flight
        self._default_memo: tuple[int, Mapping | None] | None = None
        self._reservations_memo: dict[str, tuple[tuple[int, int, int], NamespaceReservations]] = {}
        # The cached groups' claims, kept by the podgroups cache's events from first use on.
        self._stored: StoredClaims | None = None
        self._stored_lock = threading.Lock()

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

    def stored_priority_class(self, name: str) -> Mapping | None:
        """The PriorityClass `name` as kube-apiserver stores it (a quorum GET), None when there
        is none or no API server (offline, tests: the cache is all there is)."""
        if self.client is None or not priority.is_dns1123_subdomain(name):
            return None  # no API server, or a name no stored object can have (nor a path)
        forbid_waiting(f"a quorum GET of PriorityClass {name}")
        try:
            return self.client.get(
                resource_path("scheduling.k8s.io/v1", "priorityclasses", name=name), timeout=(3, 3)
            )
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def class_uses(self, name: str, deadline: float) -> list[Use]:
        """The live workloads and PodGroups naming class `name`, by LISTs of every kind that may
        (priogate/kube/class_users.py; raises ListingFailed). Nothing where there is no API
        server (offline): nothing else exists there."""
        if self.client is None:
            return []
        forbid_waiting("LISTs of the class's users")
        return class_uses(self.client, name, deadline=deadline)

    def namespaces(self, deadline: float) -> list[Mapping[str, Any]]:
        """Every namespace, by a LIST (raises ListingFailed); none offline."""
        if self.client is None:
            return []
        forbid_waiting("a LIST of namespaces")
        return list_namespaces(self.client, deadline=deadline)

    def namespace_default_class(self, namespace: str) -> str | None:
        """The namespace's default PriorityClass name (priogate.namespace_default), as the watch
        shows it: an annotation written a moment ago is seen after the watch's latency, as
        kube-apiserver's own namespace informer sees it."""
        cache = self.caches.get("namespaces")
        return namespace_default.default_class(cache.get("", namespace) if cache is not None else None)

    def resource_quotas(self, namespace: str) -> list[Mapping[str, Any]]:
        return list(self.caches["resourcequotas"].namespace(namespace).values())

    def live_podgroups(self, namespace: str) -> Mapping[str, bool]:
        """uid -> whether it is being deleted, of the namespace's cached (stored) PodGroups."""
        return self.stored_groups(namespace).live

    def podgroup(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The cached PodGroup (Volcano's schema), or None."""
        return self.caches["podgroups"].get(namespace, name)

    def podgroups_generation(self, namespace: str) -> int:
        """Changes whenever the namespace's cached PodGroups change."""
        return self.caches["podgroups"].namespace_generation(namespace)

    def stored_podgroups(self, namespace: str) -> Mapping[str, Entry]:
        """uid -> the claim of each cached (stored) PodGroup, with its generation."""
        return self.stored_groups(namespace).claims

    def stored_groups(self, namespace: str) -> StoredGroups:
        """The cached (stored) PodGroups' claims and their sums by class, as of one moment."""
        return (self._stored or self.follow_stored_groups()).of(namespace)

    def follow_stored_groups(self) -> StoredClaims:
        """Keep the cached groups' claims by the podgroups cache's events from now on. The quota
        server starts this with its caches: started by the first admission instead, that
        admission would pay for reading every cached group inside its deadline."""
        with self._stored_lock:
            if self._stored is None:
                cache = self.caches["podgroups"]
                stored = StoredClaims(stamp(dt.datetime.min.replace(tzinfo=dt.UTC)))
                # Heard before the fill reads the cache, so no event falls between the two.
                cache.on_event = chained(stored.on_event, cache.on_event)
                stored.fill(cache.items)
                self._stored = stored
            return self._stored

    def cached_listing(self, namespace: str, now: dt.datetime) -> Listing:
        """The cached PodGroups as a listing (offline mode and tests stand it in for a LIST)."""
        return listing_of(self.caches["podgroups"].namespace(namespace).values(), now)

    def cached_ledger(self, namespace: str) -> Ledger | None:
        """The namespace's ledger as the watch shows it; DamagedLedger when unreadable."""
        obj = self.caches["ledgers"].get(self.ledger_namespace, ledger_name(namespace))
        return ledger_of(obj) if obj is not None else None

    def listed_podgroups(self, namespace: str) -> dict[str, str]:
        """uid -> name of the namespace's PodGroups by a quorum LIST (ApiClient.list_all), not
        the cache: what a reservation is freed on. Raises when the API server cannot answer."""
        if self.client is None:
            return self.live_podgroups(namespace)
        forbid_waiting("a quorum LIST of PodGroups")
        path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace)
        groups = self.client.list_all(path, timeout=(3, 5))
        return {g["metadata"].get("uid", ""): g["metadata"]["name"] for g in groups}

    def enroll(self, namespace: str, deadline: float) -> bool:
        """Set the enrolment label (priogate.scope) on the namespace. False where there is no
        API server (offline, tests): nothing routes by the label there, so nothing to prove."""
        if self.client is None:
            return False
        forbid_waiting("labelling the namespace")
        label_namespace(self.client, namespace, deadline=deadline)
        return True

    def probe_refusal(self, namespace: str) -> str | None:
        """The refusal of one dry-run coverage probe in the namespace (priogate.scope)."""
        if self.client is None:
            return None
        forbid_waiting("a dry-run probe")
        return probe_refusal(self.client, namespace)

    def preemption_preview(self, kind: str, obj: Mapping[str, Any]) -> Outcome | None:
        """The preemption engine's decision for `obj` (priogate.preemption_preview.pending) on
        the cluster these caches show (webhook/preview_state.py); None while they have not
        listed yet, or when the state already holds an object of its name."""
        if self._preview is None:
            if not all(name in self.caches for name in PREVIEW_CACHES):
                return None
            self._preview = PreviewState(self.caches)
        if not self._preview.listed():
            return None
        return self._preview.decide(kind, obj, time.time())

    def reservations(self, namespace: str) -> NamespaceReservations:
        """What the caches show of the namespace's reservations (admission of PodGroups, and of
        pods where something is reserved, decides in a ledger turn instead)."""
        ledgers, pods, groups = self.caches["ledgers"], self.caches["pods"], self.caches["podgroups"]
        key = (
            ledgers.namespace_generation(self.ledger_namespace),
            pods.namespace_generation(namespace),
            groups.namespace_generation(namespace),
        )
        memo = self._reservations_memo.get(namespace)
        if memo is not None and memo[0] == key:
            return memo[1]
        consumed: dict[str, ResourceList] = {}
        member_uids: dict[str, bool] = {}
        for pod in pods.namespace(namespace).values():
            group = podgroup.group_of(pod)
            if group and not podgroup.is_terminal(pod):
                consumed[group] = add(consumed.get(group, {}), quota_names(pod_requests(pod), 1))
                member_uids[(pod.get("metadata") or {}).get("uid", "")] = True
        damaged = False
        try:
            ledger = self.cached_ledger(namespace)
        except DamagedLedger:
            ledger, damaged = None, True
        stored = self.stored_podgroups(namespace)
        entries = adopted(ledger.entries if ledger else {}, stored.values())
        value = NamespaceReservations(
            entries,
            consumed,
            self.live_podgroups(namespace),
            member_uids,
            ledger is not None,
            stored,
            damaged,
        )
        self._reservations_memo[namespace] = (key, value)
        return value


class CacheReads:
    """A turn's reads served from the caches: for the in-process store of a single-process
    server (offline mode, benchmarks) and in-process tests, where the caches are the truth."""

    def __init__(self, view: CacheView, namespace: str) -> None:
        self.view = view
        self.namespace = namespace
        self._listing: Listing | None = None

    def quotas(self) -> list[Mapping[str, Any]]:
        return self.view.resource_quotas(self.namespace)

    def quota(self, name: str) -> Mapping[str, Any] | None:
        return next((q for q in self.quotas() if (q.get("metadata") or {}).get("name") == name), None)

    def podgroups(self) -> Listing:
        if self._listing is None:  # at most once per turn, as priogate.ledger.model.Reads says
            started = dt.datetime.now(dt.UTC)
            if self.view.client is not None:  # a quorum LIST where there is an API server to ask
                path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, self.namespace)
                self._listing = listing_of(self.view.client.list_all(path, timeout=(3, 5)), started)
            else:
                self._listing = self.view.cached_listing(self.namespace, started)
        return self._listing


def memory_view(caches: Mapping[str, WatchCache], **kw: Any) -> CacheView:
    """A view whose ledger lives in this process (priogate.ledger.memory.MemoryLedgerStore)."""
    from priogate.ledger.memory import MemoryLedgerStore

    view = CacheView(caches, None, **kw)
    view.ledger_store = MemoryLedgerStore(lambda namespace: CacheReads(view, namespace))
    return view
