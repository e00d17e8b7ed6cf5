"""Leader election through the real control plane: two controllers contend for the Lease, only
the leader reconciles, and a SIGTERM to the leader hands over within seconds (the leader clears
holderIdentity as it stops), not after the 15 s lease duration."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests

from localcluster import LocalCluster, components
from localcluster.procs import free_ports, log_tail
from priogate.kube.client import ApiClient, load_client
from tests.builders import podgroup
from tests.e2e.conftest import _figures
from tests.e2e.controller_helpers import groups_path, metric, wait_phase
from tests.e2e.helpers import wait_for

LEASE = "/apis/coordination.k8s.io/v1/namespaces/priogate-system/leases/priogate-controller"
LEASE_DURATION = 15.0


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> ApiClient:
    return load_client(str(cluster.kubeconfig))


@pytest.fixture
def contenders(cluster: LocalCluster) -> Iterator[dict[str, str]]:
    """Two controllers instead of the test run's one (restarted afterwards): identity -> metrics URL."""
    cluster.supervisor.stop("controller")
    urls = {}
    try:
        for identity, port in zip(("e2e-a", "e2e-b"), free_ports(2), strict=True):
            argv = components.controller(
                cluster.controller_kubeconfig, port, f"--leader-elect-identity={identity}"
            )
            cluster.supervisor.start(identity, argv, cluster.logs / f"controller-{identity}.log")
            urls[identity] = f"http://127.0.0.1:{port}"
        # Both serving with synced caches, so both really contend (a slow start under load
        # must not look like a standby that is not there).
        wait_for(lambda: all(_healthy(u) for u in urls.values()), 60, "both controllers are healthy")
        yield urls
    finally:
        for identity in urls:
            if any(p.name == identity for p in cluster.supervisor.procs):
                cluster.supervisor.stop(identity)
        cluster.start_controller()


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=3, proxies={"http": "", "https": ""}).status_code == 200
    except requests.RequestException:
        return False


def leaders(urls: dict[str, str]) -> list[str]:
    found = []
    for identity, url in urls.items():
        try:
            if metric(url, "priogate_controller_leader") == 1:
                found.append(identity)
        except OSError:
            continue  # not serving yet, or stopped
    return found


def reconciles(url: str) -> float:
    return metric(url, "priogate_controller_reconciles_total", {"kind": "podgroup"})


def test_one_leader_reconciles_and_hands_over_on_sigterm(
    client: ApiClient, namespace: str, cluster: LocalCluster, contenders: dict[str, str]
):
    try:
        _contend(client, namespace, cluster, contenders)
    except AssertionError as e:
        tails = "\n".join(
            f"--- controller {i} log:\n{log_tail(cluster.logs / f'controller-{i}.log', 40)}"
            for i in contenders
        )
        raise AssertionError(f"{e}\n{tails}") from None


def _contend(client: ApiClient, namespace: str, cluster: LocalCluster, contenders: dict[str, str]) -> None:
    wait_for(lambda: len(leaders(contenders)) == 1, 60, "one of the two controllers leads")
    (leader,) = leaders(contenders)
    (standby,) = set(contenders) - {leader}
    assert client.get(LEASE)["spec"]["holderIdentity"] == leader
    transitions = client.get(LEASE)["spec"].get("leaseTransitions", 0)

    client.create(groups_path(namespace), podgroup("first", namespace=None, min_member=1))
    wait_phase(client, namespace, "first", "Inqueue")
    # The reconcile is counted once it has finished (after the status write the phase shows,
    # and the gang-preemption step after it): wait for the count, do not race it.
    wait_for(lambda: reconciles(contenders[leader]) > 0, 10, "the leader counts its reconcile")
    # The standby has its caches and sees every event, but never acts.
    assert reconciles(contenders[standby]) == 0
    assert leaders(contenders) == [leader]

    sent = time.monotonic()
    cluster.supervisor.stop(leader)  # SIGTERM by pid; returns once the process has exited
    exited = time.monotonic() - sent
    wait_for(lambda: leaders({standby: contenders[standby]}) == [standby], 30, "the standby leads", 0.05)
    handover = time.monotonic() - sent
    _figures["controller leader handover after SIGTERM"] = (
        f"{handover:.2f} s (leader exited in {exited:.2f} s)"
    )
    print(f"leader handover after SIGTERM: {handover:.2f} s (old leader exited after {exited:.2f} s)")
    # Released, not expired: the standby took over before the lease could have run out.
    assert handover < LEASE_DURATION
    lease = client.get(LEASE)["spec"]
    assert lease["holderIdentity"] == standby
    assert lease["leaseTransitions"] == transitions + 1

    client.create(groups_path(namespace), podgroup("second", namespace=None, min_member=1))
    wait_phase(client, namespace, "second", "Inqueue")
    assert reconciles(contenders[standby]) > 0
