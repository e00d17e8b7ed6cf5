"""kube-apiserver stopped for longer than the caches' quiet bound, then started again: the webhook
and the controller say they are not ready while their caches are stale, no live reservation is
lost (right after a restart the PodGroup CRD may answer 404 for a moment, which once emptied the
cache and let the sweep and the webhook's pruning free every old reservation), an over-quota
PodGroup is still refused afterwards, and readiness comes back.

Its own control plane: the webhook and controller run with a short --cache-quiet-seconds and a
controller sweeping every second, so the test spans several sweeps and quiet bounds."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from localcluster import LocalCluster, Options
from localcluster.procs import progress
from priogate.clock import rfc3339
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, entries_of, ledger_object, ledger_path
from priogate.ledger.model import Ledger
from tests.builders import podgroup
from tests.e2e.helpers import wait_for

QUIET_SECONDS = 4.0
DOWN_SECONDS = 3 * QUIET_SECONDS
NAMESPACE = "restart"


@pytest.fixture(scope="module")
def lc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    options = Options(
        state_dir=tmp_path_factory.mktemp("restart"),
        nodes=1,
        webhook_workers=2,
        cache_quiet_seconds=QUIET_SECONDS,
        controller_args=("--reclaim-seconds=1", "--in-flight-seconds=2"),
    )
    cluster = LocalCluster(options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def get(url: str, ca: Path | None = None, cert: tuple[Path, Path] | None = None) -> tuple[int, str]:
    session = requests.Session()
    session.trust_env = False
    try:
        client_cert = tuple(map(str, cert)) if cert else None
        r = session.get(url, verify=str(ca) if ca else False, cert=client_cert, timeout=3)
    except requests.RequestException as e:
        return 0, repr(e)
    return r.status_code, r.text


def webhook_ready(lc: LocalCluster) -> tuple[int, str]:
    assert lc.ports and lc.pki
    return get(f"{lc.ports.webhook_url}/readyz", lc.pki.ca_crt, lc.webhook_client_cert)


def health_ready(lc: LocalCluster) -> tuple[int, str]:
    """The webhook's /readyz on its plain-HTTP health port (no client certificate): what
    kubelet's readiness probe reads in a cluster, mTLS or not."""
    assert lc.ports and lc.ports.webhook_health
    return get(f"{lc.ports.webhook_health_url}/readyz")


def controller_ready(lc: LocalCluster) -> tuple[int, str]:
    assert lc.ports
    return get(f"{lc.ports.controller_url}/readyz")


def stale_gauge(lc: LocalCluster, cache: str) -> tuple[float, float]:
    """priogate_cache_stale{cache} as the webhook and the controller export it."""
    assert lc.ports and lc.pki
    line = f'priogate_cache_stale{{cache="{cache}"}} '
    values = []
    hook = (lc.ports.webhook_url, lc.pki.ca_crt, lc.webhook_client_cert)
    for url, ca, cert in (hook, (lc.ports.controller_url, None, None)):
        _, text = get(f"{url}/metrics", ca, cert)
        values.append(next(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line)))
    return values[0], values[1]


def groups_path(namespace: str) -> str:
    return resource_path("scheduling.volcano.sh/v1beta1", "podgroups", namespace)


# What kube-apiserver answers (503) while it has not loaded the PodGroup CRD's schema, for a few
# seconds after it starts: the in-process PodGroup policy (webhook/priority_policy.py) cannot run.
SCHEMA_NOT_LOADED = "There can be a delay between when CustomResourceDefinitions are created"


def create_group(api: ApiClient, name: str, cpu: str, namespace: str = NAMESPACE) -> str | None:
    """None when admitted, else the refusal's message (with its status)."""
    body = podgroup(name, namespace=None, min_member=1, min_resources={"cpu": cpu})
    try:
        api.create(groups_path(namespace), body)
    except ApiError as e:
        return f"{e.status} {e.message}"
    return None


def decided(api: ApiClient, name: str, cpu: str, namespace: str = NAMESPACE) -> str | None:
    """As create_group, but a 'stale, retry' or 'starting' refusal (a worker whose caches are
    not current yet), and kube-apiserver's 503 before it has the CRD's schema, are retried: the
    answer is a decision."""
    answer: list[str | None] = []

    def got_decision() -> bool:
        message = create_group(api, name, cpu, namespace)
        transient = ("retry", "connection refused", SCHEMA_NOT_LOADED)
        if message is not None and any(t in message for t in transient):
            return False
        answer.append(message)
        return True

    wait_for(got_decision, 90, f"PodGroup {name} gets a decision", interval=0.5)
    return answer[0]


def reservations(api: ApiClient, namespace: str = NAMESPACE) -> dict[str, str]:
    """group name -> admitted_at, from the ledger as stored."""
    ledger = api.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))
    return {e.group: e.admitted_at for e in entries_of(ledger).values()}


def old_reservation(api: ApiClient, namespace: str) -> str:
    """A namespace with quota cpu=4 and PodGroup "held" reserving cpu=3, its ledger entry made an
    hour old: far past every grace, exactly what a cache that lies about a live group frees."""
    api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    api.create(
        resource_path("v1", "resourcequotas", namespace),
        {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": "4"}}},
    )
    assert decided(api, "held", "3", namespace) is None, "the first group fits the quota"
    ledger = api.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))
    old = rfc3339(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    entries = {k: dataclasses.replace(e, admitted_at=old) for k, e in entries_of(ledger).items()}
    version = ledger["metadata"]["resourceVersion"]
    api.replace(
        ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace),
        ledger_object(DEFAULT_LEDGER_NAMESPACE, namespace, Ledger(entries), version),
    )
    assert reservations(api, namespace) == {"held": old}
    return old


def still_enforced(api: ApiClient, namespace: str) -> None:
    refused = decided(api, "over", "2", namespace)
    assert refused is not None and "exceeded quota" in refused, refused
    assert decided(api, "fits", "1", namespace) is None, "the hook decides, not just refuses"
    assert set(reservations(api, namespace)) == {"held", "fits"}


def test_restart_keeps_reservations_and_readiness_tracks_staleness(lc: LocalCluster) -> None:
    api = load_client(str(lc.kubeconfig))
    old = old_reservation(api, NAMESPACE)
    wait_for(lambda: webhook_ready(lc)[0] == 200, 30, "the webhook is ready")
    wait_for(lambda: controller_ready(lc)[0] == 200, 30, "the controller is ready")

    lc.stop_apiserver()
    down_at = time.monotonic()
    # Every watch's resourceVersion is compacted away: after the restart each cache gets 410 and
    # relists, racing the PodGroup CRD's return (the relist that once answered 404 and emptied
    # the cache).
    assert lc.etcd
    lc.etcd.compact()
    wait_for(lambda: webhook_ready(lc)[0] == 503, 2 * QUIET_SECONDS, "the webhook's /readyz fails")
    status, body = webhook_ready(lc)
    assert status == 503 and "stale" in body, body
    # The health port follows within its workers' report interval (a second).
    wait_for(lambda: health_ready(lc)[0] == 503, 5, "the health port's /readyz fails")
    wait_for(lambda: controller_ready(lc)[0] == 503, 2 * QUIET_SECONDS, "the controller's /readyz fails")
    assert stale_gauge(lc, "podgroups") == (1.0, 1.0)
    # Longer than the quiet bound: every watch has been restarted (and failed) meanwhile.
    while time.monotonic() - down_at < DOWN_SECONDS:
        assert webhook_ready(lc)[0] == 503, "ready while kube-apiserver is down"
        time.sleep(0.5)
    progress(f"kube-apiserver was down {time.monotonic() - down_at:.1f} s; starting it again")

    lc.restart_apiserver(lc.mode)
    wait_for(lambda: webhook_ready(lc)[0] == 200, 120, "the webhook's /readyz recovers")
    wait_for(lambda: health_ready(lc)[0] == 200, 30, "the health port's /readyz recovers")
    wait_for(lambda: controller_ready(lc)[0] == 200, 120, "the controller's /readyz recovers")
    time.sleep(5)  # several controller sweeps (every second) on recovered caches
    wait_for(lambda: stale_gauge(lc, "podgroups") == (0.0, 0.0), 30, "the stale gauges are back to 0")

    assert reservations(api) == {"held": old}, "a live group's reservation was freed"
    still_enforced(api, NAMESPACE)

    logs = (lc.logs / "webhook.log").read_text() + (lc.logs / "controller.log").read_text()
    assert "ledger made true" not in logs
    progress(
        f"relists after the restart: {logs.count('watch expired, relisting')}; answered 404:"
        f" {logs.count('resource not served')}"
    )


CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.volcano.sh"


def set_served(api: ApiClient, served: bool) -> None:
    patch = [{"op": "replace", "path": "/spec/versions/0/served", "value": served}]
    api.request("PATCH", CRD, body=patch, content_type="application/json-patch+json")


def test_controller_started_while_the_crd_is_not_served_frees_nothing(lc: LocalCluster) -> None:
    """The 404 of an API server restart, made to last: the PodGroup version is not served while
    the controller (re)starts, so its first LIST answers 404. Once that made an empty, synced
    cache, and the sweep freed every old reservation."""
    namespace = "unserved"
    api = load_client(str(lc.kubeconfig))
    old = old_reservation(api, namespace)
    controller = lc.supervisor.get("controller")
    set_served(api, False)
    try:
        wait_for(lambda: _not_found(api, groups_path(namespace)), 30, "the PodGroup version answers 404")
        lc.supervisor.restart("controller", controller.argv)
        time.sleep(8)  # many sweeps' worth (every second), had the controller started them
        status, body = controller_ready(lc)
        assert status == 503 and "podgroups" in body, (status, body)
        assert reservations(api, namespace) == {"held": old}, "freed while the CRD was not served"
    finally:
        set_served(api, True)
    wait_for(lambda: controller_ready(lc)[0] == 200, 120, "the controller's /readyz recovers")
    wait_for(lambda: webhook_ready(lc)[0] == 200, 120, "the webhook's /readyz recovers")
    time.sleep(5)  # sweeps on current caches
    assert reservations(api, namespace) == {"held": old}
    still_enforced(api, namespace)
    log = (lc.logs / "controller.log").read_text()
    assert "ledger made true" not in log
    assert "resource not served" in log


def _not_found(api: ApiClient, path: str) -> bool:
    try:
        api.get(path)
    except ApiError as e:
        return e.status == 404
    return False
