"""Every resource priogate watches, each named once: where its cache lists and watches (path and
selectors) and the name the cache goes by in logs, metrics and readiness.

A program picks the sources it reads and what its caches keep of each object (a transform from
priogate.slim): the quota server keeps PodGroup members' essentials of pods, the controller
slimmed whole pods. Neither decides again where a resource lives.
"""

from __future__ import annotations

from dataclasses import dataclass

from priogate.kube.cache import DEFAULT_QUIET_SECONDS, OnEvent, Transform, WatchCache
from priogate.kube.client import ApiClient, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, LEDGER_LABEL
from priogate.podgroup import GROUP_VERSION, PLURAL


@dataclass(frozen=True)
class Source:
    name: str  # the cache's name in logs, metrics and readiness
    path: str
    selectors: tuple[tuple[str, str], ...] = ()

    def cache(
        self,
        client: ApiClient,
        *,
        transform: Transform | None = None,
        on_event: OnEvent | None = None,
        quiet_seconds: float = DEFAULT_QUIET_SECONDS,
    ) -> WatchCache:
        """A cache of this source, not yet started."""
        return WatchCache(
            client,
            self.path,
            self.name,
            selectors=self.selectors,
            transform=transform,
            on_event=on_event,
            quiet_seconds=quiet_seconds,
        )


PRIORITY_CLASSES = Source("priorityclasses", resource_path("scheduling.k8s.io/v1", "priorityclasses"))
RESOURCE_QUOTAS = Source("resourcequotas", resource_path("v1", "resourcequotas"))
PODGROUPS = Source("podgroups", resource_path(GROUP_VERSION, PLURAL))


def ledgers(ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE) -> Source:
    """The ledgers: ConfigMaps in priogate's own namespace only (where tenants
    cannot write), and of those only the ledgers."""
    return Source(
        "ledgers",
        resource_path("v1", "configmaps", ledger_namespace),
        (("labelSelector", "=".join(LEDGER_LABEL)),),
    )


LEDGERS = ledgers()
# Namespaces, for their enrolment label (priogate.scope): cluster-scoped, few, rarely written.
NAMESPACES = Source("namespaces", resource_path("v1", "namespaces"))
NODES = Source("nodes", resource_path("v1", "nodes"))
PDBS = Source("pdbs", resource_path("policy/v1", "poddisruptionbudgets"))
# Every pod: a PodGroup's phase counts its Succeeded and Failed members (priogate.phase).
PODS = Source("pods", resource_path("v1", "pods"))
# Every pod again, under a name of its own: the preemption preview's cache (slimmed whole pods,
# as the controller keeps them) beside the quota server's members-only "pods" cache.
PREEMPTION_PODS = Source("preemption-pods", resource_path("v1", "pods"))
# Terminated pods use no quota (kubernetes pkg/quota/v1/evaluator/core/pods.go, QuotaV1Pod), so
# the quota check need not hear of them.
UNFINISHED_PODS = Source(
    "pods", resource_path("v1", "pods"), (("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed"),)
)
