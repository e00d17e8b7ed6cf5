"""Every API read the plugin makes, and nothing else: the edge the pure modules stand behind.

Reads are quorum LISTs (ApiClient.list_all): a person asking "why" wants the state now, not a
cache's. Reservations are read through `ledger_entries` alone, so moving the ledger (another
namespace, another object) changes that one function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from priogate import podgroup
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.ledger.codec import (
    DEFAULT_LEDGER_NAMESPACE,
    LEDGER_LABEL,
    covered_namespace,
    entries_of,
    ledger_path,
    stored_size,
)
from priogate.ledger.model import Entry
from priogate.ledger.stored_groups import entry_of_group

JSON = dict[str, Any]
LIST_TIMEOUT = (5, 60)


@dataclass(frozen=True)
class LedgerRead:
    """A namespace's ledger as the plugin read it."""

    entries: dict[str, Entry]  # by PodGroup uid
    # The ledger's size as kube-apiserver counts it against a ConfigMap's 1 MiB; None when the
    # entries were derived from the stored PodGroups (a user who may not read the ledger).
    stored_bytes: int | None


class LedgerNamespaceNotFound(Exception):
    """The namespace the plugin reads ledgers from does not exist: priogate is
    installed elsewhere (--priogate-namespace), or not at all."""

    def __init__(self, namespace: str) -> None:
        super().__init__(
            f'namespace "{namespace}", where priogate keeps its ledgers, does not exist:'
            " give the namespace priogate is installed in with --priogate-namespace"
            " (or $PRIOGATE_NAMESPACE)"
        )
        self.namespace = namespace


class Source:
    def __init__(self, client: ApiClient, priogate_namespace: str = DEFAULT_LEDGER_NAMESPACE) -> None:
        self.client = client
        # Where priogate is installed, and so where its ledgers live (the chart installs into any
        # namespace; the webhook's --ledger-namespace is its release namespace).
        self.priogate_namespace = priogate_namespace

    def _list(
        self, group_version: str, plural: str, namespace: str | None = None, **query: str
    ) -> list[JSON]:
        path = resource_path(group_version, plural, namespace)
        if not query:
            return self.client.list_all(path, timeout=LIST_TIMEOUT)
        page = self.client.get(path, query=sorted(query.items()), timeout=LIST_TIMEOUT)
        return list(page.get("items") or [])

    def get(self, group_version: str, plural: str, namespace: str, name: str) -> JSON:
        return self.client.get(resource_path(group_version, plural, namespace, name))

    # ---- the snapshot's kinds ------------------------------------------------------------------

    def nodes(self) -> list[JSON]:
        return self._list("v1", "nodes")

    def pods(self, namespace: str | None = None) -> list[JSON]:
        return self._list("v1", "pods", namespace)

    def podgroups(self, namespace: str | None = None, *, missing_ok: bool = False) -> list[JSON]:
        """`missing_ok`: a cluster without the PodGroup CRD has no PodGroups (simulate); else the
        404 goes up, as kubectl's "the server doesn't have a resource type" does."""
        try:
            return self._list(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace)
        except ApiError as e:
            if e.status == 404 and missing_ok:
                return []
            raise

    def podgroup(self, namespace: str, name: str) -> JSON:
        return self.get(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace, name)

    def pdbs(self) -> list[JSON]:
        return self._list("policy/v1", "poddisruptionbudgets")

    def priority_classes(self) -> list[JSON]:
        return self._list("scheduling.k8s.io/v1", "priorityclasses")

    def resource_quotas(self, namespace: str | None = None) -> list[JSON]:
        return self._list("v1", "resourcequotas", namespace)

    # ---- why -----------------------------------------------------------------------------------

    def events_regarding(self, namespace: str, kind: str, name: str) -> list[JSON]:
        """events.k8s.io/v1 Events about one object (any uid: a preempted pod is gone, and a
        new pod of its name is another object, which the caller tells apart by uid)."""
        selector = f"regarding.kind={kind},regarding.name={name}"
        return self._list("events.k8s.io/v1", "events", namespace, fieldSelector=selector)

    # ---- the reservation ledger ----------------------------------------------------------------

    def ledger_entries(self, namespace: str | None) -> dict[str, dict[str, Entry]]:
        """Tenant namespace -> its ledger's entries (by PodGroup uid), as
        read_ledgers reads them."""
        return {ns: ledger.entries for ns, ledger in self.read_ledgers(namespace).items()}

    def read_ledgers(self, namespace: str | None) -> dict[str, LedgerRead]:
        """Tenant namespace -> its ledger; every namespace that has a ledger when
        `namespace` is None. The only place that knows where ledgers live: in priogate's own
        namespace, where a namespace user may not read them. For such a user the entries are
        derived from the namespace's stored PodGroups, as priogate rebuilds a ledger (the ledger
        only adds admissions still in flight)."""
        if namespace is not None:
            try:
                ledger: Mapping[str, Any] | None = self.client.get(
                    ledger_path(self.priogate_namespace, namespace)
                )
            except ApiError as e:
                if e.status == 403:
                    return {namespace: LedgerRead(self._derived(namespace), None)}
                if e.status != 404:
                    raise
                # A GET of a ConfigMap in a namespace that does not exist is a 404 too: "nothing
                # reserved" only when the namespace is there.
                self._require_priogate_namespace()
                ledger = None
            return {namespace: _read(ledger)} if ledger is not None else {}
        found: dict[str, LedgerRead] = {}
        ledgers = self._list(
            "v1", "configmaps", self.priogate_namespace, labelSelector="=".join(LEDGER_LABEL)
        )
        if not ledgers:  # a LIST in a namespace that does not exist is empty, not a 404
            self._require_priogate_namespace()
        for cm in ledgers:
            covered = covered_namespace(cm)
            if covered:
                found[covered] = _read(cm)
        return found

    def _require_priogate_namespace(self) -> None:
        """Raise LedgerNamespaceNotFound when the ledgers' namespace does not exist. A user who may
        not read namespaces (403) gets the benefit of the doubt: the ledgers are simply absent."""
        try:
            self.client.get(resource_path("v1", "namespaces", None, self.priogate_namespace))
        except ApiError as e:
            if e.status == 404:
                raise LedgerNamespaceNotFound(self.priogate_namespace) from None
            if e.status != 403:
                raise

    def _derived(self, namespace: str) -> dict[str, Entry]:
        out: dict[str, Entry] = {}
        for group in self.podgroups(namespace, missing_ok=True):
            try:
                entry = entry_of_group(group, "")
            except (ValueError, TypeError):
                continue
            out[entry.key] = entry
        return out


def _read(ledger: Mapping[str, Any]) -> LedgerRead:
    return LedgerRead(entries_of(ledger), stored_size(ledger))
