"""webhook/health.py's pure parts: when the workers' samples make the pod ready, and the bind."""

from __future__ import annotations

import http.client

import pytest

from webhook.health import Readiness, parse_bind, readiness, serve


def test_ready_only_when_every_configured_worker_reports_ready():
    assert readiness({"10": 1.0, "11": 1.0}, workers=2) == Readiness(True, "ok")
    assert not readiness({}, workers=2).ready
    one = readiness({"10": 1.0}, workers=2)
    assert not one.ready and "1 of 2" in one.reason
    stale = readiness({"10": 1.0, "11": 0.0}, workers=2)
    assert not stale.ready and "11" in stale.reason


@pytest.mark.parametrize(
    ("bind", "want"),
    [("0.0.0.0:8081", ("0.0.0.0", 8081)), (":8081", ("0.0.0.0", 8081)), ("[::]:8081", ("::", 8081))],
)
def test_parse_bind(bind, want):
    assert parse_bind(bind) == want


@pytest.mark.parametrize("bind", ["8081", "host:", "host:http"])
def test_parse_bind_refuses(bind):
    with pytest.raises(ValueError):
        parse_bind(bind)


def test_the_handler_answers_from_its_callbacks():
    state = {"ready": Readiness(False, "1 of 2 workers ready")}
    server = serve("127.0.0.1:0", lambda: state["ready"], lambda: (b"m 1\n", "text/plain"))
    port = server.server_address[1]

    def get(path: str, method: str = "GET") -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request(method, path)
        r = conn.getresponse()
        out = r.status, r.read()
        conn.close()
        return out

    try:
        assert get("/readyz") == (503, b"1 of 2 workers ready\n")
        state["ready"] = Readiness(True, "ok")
        assert get("/readyz") == (200, b"ok\n")
        assert get("/healthz") == (200, b"ok\n")
        assert get("/metrics") == (200, b"m 1\n")
        assert get("/metrics?x=1")[0] == 200
        assert get("/other")[0] == 404
        assert get("/readyz", "POST")[0] == 405
    finally:
        server.shutdown()
        server.server_close()
