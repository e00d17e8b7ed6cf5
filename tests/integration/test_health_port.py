"""The plain-HTTP health and metrics port (--health-bind, webhook/health.py) of the real server,
with mutual TLS required on the webhook port: probes and Prometheus need no client certificate,
readiness waits for every worker, other methods and paths are refused, and a client that stalls
does not stop the probes."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import time

import pytest

from tests.builders import SYSTEM_CLASSES
from tests.serving import RunningServer, start_server, tls_refusal


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("health"), SYSTEM_CLASSES, client_ca=True, health=True)
    yield srv
    assert srv.stop() == 0


def request(srv: RunningServer, method: str, path: str) -> tuple[int, str, str]:
    assert srv.health_port
    conn = http.client.HTTPConnection("127.0.0.1", srv.health_port, timeout=5)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read().decode()
    finally:
        conn.close()


def test_the_webhook_port_requires_a_client_certificate(server):
    import ssl

    context = ssl.create_default_context(cafile=str(server.ca_file))
    assert tls_refusal(server.port, context).startswith(("handshake:", "alert:", "closed"))


def wait_ready(srv: RunningServer, timeout: float = 20) -> tuple[int, str]:
    """/readyz until 200: start_server waited for one worker's TLS /readyz, not for all."""
    deadline = time.monotonic() + timeout
    while True:
        status, _, body = request(srv, "GET", "/readyz")
        if status == 200 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.2)


def test_probes_and_metrics_need_no_client_certificate(server):
    assert request(server, "GET", "/healthz")[0] == 200
    assert wait_ready(server) == (200, "ok\n")
    status, content_type, text = request(server, "GET", "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    assert "priogate_build_info{" in text
    ready = [line for line in text.splitlines() if line.startswith("priogate_webhook_worker_ready{")]
    assert len(ready) == 2 and all(line.endswith(" 1.0") for line in ready), ready


def test_only_get_on_the_three_paths(server):
    assert request(server, "GET", "/mutate/pods")[0] == 404
    for method in ("POST", "PUT", "DELETE", "HEAD", "BREW"):
        assert request(server, method, "/readyz")[0] == 405, method


def test_a_stalled_client_does_not_stop_the_probes(server):
    stalled = [socket.create_connection(("127.0.0.1", server.health_port)) for _ in range(10)]
    try:
        stalled[0].sendall(b"GET /rea")
        start = time.monotonic()
        assert request(server, "GET", "/readyz")[0] == 200
        assert time.monotonic() - start < 2
    finally:
        for s in stalled:
            s.close()


def ready_workers(srv: RunningServer) -> dict[str, str]:
    """pid -> priogate_webhook_worker_ready, from the health port's /metrics."""
    text = request(srv, "GET", "/metrics")[2]
    prefix = 'priogate_webhook_worker_ready{pid="'
    return {
        line[len(prefix) :].split('"')[0]: line.split()[-1]
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_readiness_follows_every_worker(tmp_path):
    """A worker killed drops out of the samples (child_exit marks it dead); its replacement
    reports once its caches are loaded, and readiness is back with all 3."""
    srv = start_server(tmp_path, SYSTEM_CLASSES, workers=3, health=True)
    try:
        assert wait_ready(srv)[0] == 200
        before = ready_workers(srv)
        assert len(before) == 3 and set(before.values()) == {"1.0"}, before
        os.kill(int(next(iter(before))), signal.SIGKILL)
        deadline = time.monotonic() + 20
        while set(ready_workers(srv)) & set(before) != set(before) - {next(iter(before))}:
            assert time.monotonic() < deadline, "the killed worker is still counted"
            time.sleep(0.1)
        assert wait_ready(srv)[0] == 200
        after = ready_workers(srv)
        assert len(after) == 3 and next(iter(before)) not in after, after
    finally:
        assert srv.stop() == 0
