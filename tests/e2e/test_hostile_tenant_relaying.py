"""A hostile tenant (tests/e2e/tenant.py: the built-in `edit` role in one namespace, acting
through impersonation) against two quota servers that relay ledger admissions to the
namespace's writer, as manifests/ deploys them without client certificates (docs/ledger.md,
"One writer per namespace"). Relaying moves where an admission is decided, never what is
decided: the tenant's bursts fill the quota exactly, and no grow gets past it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from fractions import Fraction

import pytest

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, entries_of, ledger_path
from priogate.resources import parse_quantity
from tests.builders import podgroup_body
from tests.e2e.helpers import wait_for
from tests.e2e.tenant import GROUP, VERSION, Tenant
from tests.podgroup_load import create_concurrently
from tests.replicas import RELAYS, cluster_replicas, point_quota_server, proxied, relay_settled, server_metric

QUOTA_CPU = 10


@pytest.fixture
def relaying(cluster: LocalCluster, admin: ApiClient) -> Iterator[list[int]]:
    """Two relaying quota servers behind a round-robin proxy, answering every quota hook (as the
    quota containers of two pods behind a Service); the cluster's own webhook again after."""
    replicas = cluster_replicas(cluster, 2, 1, relay=True)
    ports = [port for _, port in replicas]
    try:
        with proxied(ports) as proxy:
            point_quota_server(admin, proxy.url)
            try:
                yield ports
            finally:
                point_quota_server(admin, cluster.ports.webhook_url)
    finally:
        for proc, _ in replicas:
            cluster.supervisor.stop(proc.name)


def _quota(admin: ApiClient, namespace: str) -> None:
    admin.create(
        resource_path("v1", "resourcequotas", namespace),
        {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": str(QUOTA_CPU)}}},
    )


def _stored(admin: ApiClient, namespace: str) -> dict[str, Fraction]:
    items = admin.get(resource_path(f"{GROUP}/{VERSION}", "podgroups", namespace))["items"]
    return {g["metadata"]["name"]: parse_quantity(g["spec"]["minResources"]["cpu"]) for g in items}


def test_a_tenants_bursts_through_relaying_replicas_fill_the_quota_exactly(
    tenant: Tenant, admin: ApiClient, cluster: LocalCluster, relaying: list[int]
):
    _quota(admin, tenant.namespace)

    as_tenant = load_client(str(cluster.kubeconfig), pool_size=24)
    as_tenant.set_default_header("Impersonate-User", tenant.user)
    path = resource_path(f"{GROUP}/{VERSION}", "podgroups", tenant.namespace)
    refusals = 0

    def both_replicas_see_the_quota() -> bool:
        """Refused as too big several times in a row: the proxy takes turns between the replicas."""
        nonlocal refusals
        try:
            as_tenant.create(path, podgroup_body("too-big", {"cpu": str(QUOTA_CPU + 1)}), dry_run=True)
        except ApiError as e:
            refusals = refusals + 1 if "exceeded quota" in e.message else 0
        else:
            refusals = 0
        return refusals >= 6

    wait_for(both_replicas_see_the_quota, 60, "both replicas refuse a PodGroup larger than the quota", 0.05)
    # The namespace's first claim, alone: it enrols the namespace (priogate.scope).
    as_tenant.create(path, podgroup_body("first", {"cpu": "1"}))
    # It names the ledger's writer: once each replica's cache shows it, the burst's claims that
    # land on the other replica are relayed.
    relayed_before = relay_settled(cluster, as_tenant, path, relaying)
    burst = create_concurrently(as_tenant, tenant.namespace, 60, cpu="1", in_flight=16, monitor_client=admin)
    assert not burst.errors, burst.errors[:5]
    assert len(burst.admitted) == QUOTA_CPU - 1, burst
    assert burst.denials["exceeded quota"] == 60 - (QUOTA_CPU - 1), burst
    assert burst.max_stored_cpu <= QUOTA_CPU and burst.max_ledger_cpu <= QUOTA_CPU

    # Then every admitted group grown at once, and more created beside: the quota is full, so
    # each grow and each create must be refused, whichever replica it lands on.
    refused: list[str] = []
    admitted: list[str] = []
    lock = threading.Lock()

    def attempt(what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except ApiError as e:
            with lock:
                refused.append(e.message)
            return
        with lock:
            admitted.append(what)

    def grow(name: str) -> None:
        patch = {"spec": {"minResources": {"cpu": "2"}}}
        kind = "application/merge-patch+json"
        url = f"{path}/{name}"
        attempt(f"grew {name}", lambda: as_tenant.request("PATCH", url, body=patch, content_type=kind))

    def create(i: int) -> None:
        attempt(f"created late-{i}", lambda: as_tenant.create(path, podgroup_body(f"late-{i}", {"cpu": "1"})))

    threads = [threading.Thread(target=grow, args=(name,)) for name in ["first", *burst.admitted]]
    threads += [threading.Thread(target=create, args=(i,)) for i in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not admitted, admitted
    assert len(refused) == len(threads) and all("exceeded quota" in m for m in refused), refused[:3]

    stored = _stored(admin, tenant.namespace)
    assert sorted(stored) == sorted(["first", *burst.admitted])
    assert sum(stored.values()) == QUOTA_CPU
    ledger = admin.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, tenant.namespace))
    assert {e.group for e in entries_of(ledger).values()} == set(stored)
    relayed = [
        server_metric(port, RELAYS, {"outcome": "answered"}, cluster.pki.ca_crt, cluster.webhook_client_cert)
        for port in relaying
    ]
    assert sum(relayed) > relayed_before, (
        f"no admission was relayed to the writer: {relayed_before}, {relayed}"
    )
