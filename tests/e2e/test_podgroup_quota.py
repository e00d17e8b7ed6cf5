"""PodGroupMinResources through the real control plane: exact admission under concurrency across
gunicorn worker processes and across webhook replicas, and reserved resources kept from other pods."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from fractions import Fraction

import pytest
import yaml

from localcluster import LocalCluster
from localcluster.binaries import REPO
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, entries_of, ledger_path
from priogate.ledger.turn_order import TURN_ANNOTATION, peer_of, turn_of
from priogate.resources import parse_quantity
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from tests.builders import pod, podgroup
from tests.e2e.helpers import wait_for
from tests.podgroup_load import create_concurrently
from tests.replicas import (
    LOOPBACK,
    RELAYS,
    cluster_replicas,
    point_webhook,
    proxied,
    relay_settled,
    served_count,
    server_metric,
)

GROUPS = resource_path("scheduling.volcano.sh/v1beta1", "podgroups")
QUOTA_HOOK = "podgroup-quota.priogate.io"


def relays(port: int, outcome: str, ca_file, client_cert) -> float:
    return server_metric(port, RELAYS, {"outcome": outcome}, ca_file, client_cert)


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    api = load_client(str(cluster.kubeconfig), pool_size=64)
    # The launcher installs the CRDs; make sure, idempotently, so this module stands alone.
    for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        try:
            api.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except ApiError as e:
            if e.status != 409:
                raise
    return api


def create_quota(client: ApiClient, namespace: str, cpu: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute"},
        "spec": {"hard": {"cpu": cpu}},
    }
    client.create(resource_path("v1", "resourcequotas", namespace), body)
    # ResourceQuota admission refuses pods until kube-controller-manager has filled status.used.
    # Generous: after test_differential restarts kube-apiserver, kube-controller-manager's quota
    # controller was seen to stay idle for a long while before processing any quota, which made
    # a shorter wait flaky.
    wait_for(
        lambda: (
            "cpu"
            in (
                client.get(resource_path("v1", "resourcequotas", namespace, "compute")).get("status") or {}
            ).get("used", {})
        ),
        180,
        "the quota's status.used is filled",
    )


def denial(client: ApiClient, path: str, body: dict, *, dry_run: bool = True) -> str | None:
    try:
        client.create(path, body, dry_run=dry_run)
    except ApiError as e:
        return e.message
    return None


def settled(check: object, what: str, streak: int = 6, timeout: float = 60) -> None:
    """Until `check` holds several times in a row: each webhook worker has its own caches."""
    count = 0

    def ok() -> bool:
        nonlocal count
        count = count + 1 if check() else 0
        return count >= streak

    wait_for(ok, timeout, what, 0.05)


@contextlib.contextmanager
def quota_webhook_at(cluster: LocalCluster, client: ApiClient, url: str) -> Iterator[None]:
    """Send PodGroup validation to `url` while the block runs (as if the Service moved)."""
    point_webhook(client, QUOTA_HOOK, url, "/validate/podgroups")
    try:
        yield
    finally:
        point_webhook(client, QUOTA_HOOK, cluster.ports.webhook_url, "/validate/podgroups")


def enroll(client: ApiClient, namespace: str) -> None:
    """Enrolled (priogate.scope) up front, as after a first claim: every PodGroup then goes to
    the reservation hook (test_hook_scope.py covers the enrolment itself)."""
    client.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}",
        body={"metadata": {"labels": {ENROLLED_LABEL: ENROLLED_VALUE}}},
        content_type="application/merge-patch+json",
    )


@contextlib.contextmanager
def forging_turn_stamps(client: ApiClient, namespace: str, every: float = 0.05) -> Iterator[list[int]]:
    """Rewrite the ledger's turn stamp (priogate.ledger.turn_order) while the block runs, as someone
    allowed to write in priogate's namespace might: higher, lower, another writer's, garbled.
    Yields the count of stamps written."""
    path = ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace)
    stamps = ["999999 forged", "0 forged", "1", "not-a-number x", ""]
    stop = threading.Event()
    written = [0]

    def forge() -> None:
        for i in itertools.count():
            if stop.wait(every):
                return
            body = {"metadata": {"annotations": {TURN_ANNOTATION: stamps[i % len(stamps)]}}}
            try:
                client.request("PATCH", path, body=body, content_type="application/merge-patch+json")
                written[0] += 1
            except ApiError as e:
                if e.status != 404:  # the ledger is written by the first admission
                    raise

    thread = threading.Thread(target=forge, daemon=True)
    thread.start()
    try:
        yield written
    finally:
        stop.set()
        thread.join(5)


@pytest.mark.parametrize(
    ("masters", "workers", "forged_stamps", "relay"),
    [
        (1, 4, False, False),
        (2, 2, False, False),
        (2, 2, True, False),
        (2, 1, False, True),
        (2, 1, True, True),
    ],
    ids=[
        "one-server-4-workers",
        "two-servers",
        "two-servers-forged-turn-stamps",
        "two-servers-relaying",
        "two-servers-relaying-forged-turn-stamps",
    ],
)
def test_concurrent_podgroups_fill_the_quota_exactly(
    cluster, client, namespace, masters, workers, forged_stamps, relay
):
    create_quota(client, namespace, "10")
    enroll(client, namespace)  # the replicas behind the proxy answer the reservation hook
    replicas = cluster_replicas(cluster, masters, workers, relay=relay)
    ports = [port for _, port in replicas]
    try:
        with proxied(ports) as proxy, quota_webhook_at(cluster, client, proxy.url):
            path = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace)

            def replicas_refuse_too_big() -> bool:
                refused = "exceeded quota" in (
                    denial(
                        client,
                        path,
                        podgroup("probe", namespace=None, min_member=1, min_resources={"cpu": "11"}),
                    )
                    or ""
                )
                return refused and proxy.connections.total() > 0

            settled(replicas_refuse_too_big, "the replicas answer PodGroup validation and see the quota")
            relayed_before = 0.0
            first = 1 if relay and not forged_stamps else 0
            if first:
                # The namespace's first claim alone names the ledger's writer. Left to the burst,
                # all ten claims can be decided before the other replica's cache sees the writer,
                # and the refusals after them need no turn (RuleSet.before_turn): nothing to relay.
                client.create(
                    path, podgroup("first", namespace=None, min_member=1, min_resources={"cpu": "1"})
                )
                relayed_before = relay_settled(cluster, client, path, ports)
            # Forged stamps may cost waits and GETs, never a decision: the precondition decides.
            forging = forging_turn_stamps(client, namespace) if forged_stamps else contextlib.nullcontext([0])
            with forging as forged:
                result = create_concurrently(client, namespace, 200 - first, cpu="1", in_flight=32)
            backends_used = dict(proxy.connections)
        assert not forged_stamps or forged[0] > 0
        assert not result.errors, result.errors[:5]
        assert len(result.admitted) == 10 - first, f"admitted {len(result.admitted)} of 200 against cpu=10"
        assert result.denials["exceeded quota"] == 190
        stored = client.get(path)["items"]
        assert len(stored) == 10
        assert sum(parse_quantity(g["spec"]["minResources"]["cpu"]) for g in stored) == Fraction(10)
        assert result.samples > 0
        assert result.max_stored_cpu <= 10 and result.max_ledger_cpu <= 10
        entries = entries_of(client.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))).values()
        assert {e.group for e in entries} == {g["metadata"]["name"] for g in stored}
        if masters > 1:
            client_cert = cluster.webhook_client_cert
            assert all(backends_used.get(p, 0) > 0 for p in ports), backends_used
            assert all(served_count(p, QUOTA_HOOK, cluster.pki.ca_crt, client_cert) > 0 for p in ports)
            relayed = [relays(p, "answered", cluster.pki.ca_crt, client_cert) for p in ports]
            # Relaying servers send a namespace's admissions to its writer; the others never do.
            # Forged stamps name no writer to relay to: the replicas then race, as without.
            if not relay:
                assert sum(relayed) == 0, relayed
            elif not forged_stamps:
                assert sum(relayed) > relayed_before, (relayed_before, relayed)
    finally:
        for proc, _ in replicas:
            cluster.supervisor.stop(proc.name)


def test_when_the_ledgers_writer_goes_away_the_other_replica_takes_its_turns(cluster, client, namespace):
    """Two relaying replicas: one writes the namespace's ledger and the other relays to it. The
    writer stops (its pod goes away, and the Service stops sending to it): every later admission
    is answered by the survivor, which then writes the ledger itself, and the quota fills exactly."""
    create_quota(client, namespace, "20")
    enroll(client, namespace)
    replicas = cluster_replicas(cluster, 2, 1, relay=True)
    names = {port: proc.name for proc, port in replicas}
    ledger = ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace)
    try:
        with proxied(list(names)) as proxy, quota_webhook_at(cluster, client, proxy.url):
            path = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace)
            too_big = podgroup("probe", namespace=None, min_member=1, min_resources={"cpu": "21"})
            settled(
                lambda: "exceeded quota" in (denial(client, path, too_big) or ""),
                "the replicas answer PodGroup validation and see the quota",
            )
            before = create_concurrently(client, namespace, 10, cpu="1", in_flight=10, prefix="a")
            assert not before.errors and len(before.admitted) == 10, before.errors[:5]
            writer = peer_of(turn_of(client.get(ledger)).writer)
            assert writer is not None and writer[1] in names, writer
            proxy.remove(writer[1])
            cluster.supervisor.stop(names.pop(writer[1]))
            (survivor,) = names
            after = create_concurrently(client, namespace, 30, cpu="1", in_flight=16, prefix="b")
        assert not after.errors, after.errors[:5]
        assert len(after.admitted) == 10 and after.denials["exceeded quota"] == 20
        assert after.max_stored_cpu <= 20 and after.max_ledger_cpu <= 20
        assert peer_of(turn_of(client.get(ledger)).writer) == (LOOPBACK, survivor)
        stored = client.get(path)["items"]
        assert sum(parse_quantity(g["spec"]["minResources"]["cpu"]) for g in stored) == Fraction(20)
    finally:
        for name in names.values():
            cluster.supervisor.stop(name)


def test_reserved_resources_cannot_be_used_by_other_pods(client, namespace):
    create_quota(client, namespace, "10")
    client.create(
        resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace),
        podgroup("gang", namespace=None, min_member=2, min_resources={"cpu": "6"}),
    )
    pods = resource_path("v1", "pods", namespace)
    settled(
        lambda: denial(client, pods, pod("probe", namespace=None, cpu="5", limits={"cpu": "5"})) is not None,
        "the webhook sees the reservation",
    )

    message = denial(client, pods, pod("greedy", namespace=None, cpu="5", limits={"cpu": "5"}), dry_run=False)
    assert message is not None
    assert (
        "exceeded quota: compute, requested: cpu=5, used: cpu=0, reserved by PodGroups: cpu=6, "
        "limited: cpu=10" in message
    )
    assert "reserved by PodGroups' minResources cannot be used by other pods" in message
    assert (
        denial(client, pods, pod("modest", namespace=None, cpu="4", limits={"cpu": "4"})) is None
    )  # 0 + 4 + 6 = 10 fits
    assert (
        denial(client, pods, pod("member", namespace=None, cpu="5", limits={"cpu": "5"}, group="gang"))
        is None
    )  # draws on its own group

    client.delete(resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace, "gang"))
    settled(
        lambda: denial(client, pods, pod("probe", namespace=None, cpu="5", limits={"cpu": "5"})) is None,
        "the released reservation is seen",
    )
    assert (
        denial(client, pods, pod("greedy", namespace=None, cpu="5", limits={"cpu": "5"}), dry_run=False)
        is None
    )


def test_dry_run_podgroup_reserves_nothing(client, namespace):
    create_quota(client, namespace, "2")
    path = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace)
    settled(
        lambda: (
            denial(client, path, podgroup("probe", namespace=None, min_member=1, min_resources={"cpu": "3"}))
            is not None
        ),
        "the webhook sees the quota",
    )
    for i in range(5):
        assert (
            denial(
                client, path, podgroup(f"dry-{i}", namespace=None, min_member=1, min_resources={"cpu": "2"})
            )
            is None
        )
    with contextlib.suppress(ApiError):  # 404: no ledger was ever written, as it should be
        assert entries_of(client.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))) == {}
    client.create(path, podgroup("real", namespace=None, min_member=1, min_resources={"cpu": "2"}))
    assert "exceeded quota" in (
        denial(
            client,
            path,
            podgroup("second", namespace=None, min_member=1, min_resources={"cpu": "1"}),
            dry_run=False,
        )
        or ""
    )


def test_growing_a_podgroup_is_checked_again(client, namespace):
    create_quota(client, namespace, "4")
    path = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace)
    settled(
        lambda: (
            denial(client, path, podgroup("probe", namespace=None, min_member=1, min_resources={"cpu": "5"}))
            is not None
        ),
        "the webhook sees the quota",
    )
    client.create(path, podgroup("a", namespace=None, min_member=1, min_resources={"cpu": "2"}))
    client.create(path, podgroup("b", namespace=None, min_member=1, min_resources={"cpu": "2"}))
    current = client.get(f"{path}/a")
    current["spec"]["minResources"]["cpu"] = "3"
    with pytest.raises(ApiError) as refused:
        client.replace(f"{path}/a", current)
    assert (
        "exceeded quota: compute, requested: cpu=3, reserved: cpu=2, limited: cpu=4" in refused.value.message
    )
    current["spec"]["minResources"]["cpu"] = "1"
    client.replace(f"{path}/a", current)
    # A shrink takes effect once stored: the ledger lowers "a" when an admission it would block
    # confirms the stored spec (the webhook's cache shows the stored generation a moment later).
    c = podgroup("c", namespace=None, min_member=1, min_resources={"cpu": "1"})
    wait_for(lambda: denial(client, path, c, dry_run=False) is None, 30, "c fits beside the shrunk a")
