"""The controller's /readyz fails while a cache is stale and says which and why; /healthz (the
liveness probe) stays up, since restarting would not bring the API server back."""

from __future__ import annotations

import urllib.error
import urllib.request

from controller.caches import Caches
from controller.serving import Metrics, serve
from priogate.kube.cache import WatchCache


def get(port: int, path: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_readyz_follows_staleness_and_healthz_does_not() -> None:
    caches = Caches(
        *(
            WatchCache.static(n, [])
            for n in ("podgroups", "pods", "quotas", "nodes", "ledgers", "pdbs", "classes")
        )
    )
    server = serve("127.0.0.1:0", Metrics(), caches.listed, caches.not_current)
    port = server.server_address[1]
    try:
        assert get(port, "/readyz") == (200, "ok\n")
        caches.podgroups.mark_stale("list failed: 404 NotFound")
        status, body = get(port, "/readyz")
        assert status == 503
        assert "podgroups" in body and "404" in body
        assert get(port, "/healthz")[0] == 200
    finally:
        server.shutdown()


def test_healthz_fails_before_the_first_list() -> None:
    caches = Caches(
        *(
            WatchCache.static(n, None)
            for n in ("podgroups", "pods", "quotas", "nodes", "ledgers", "pdbs", "classes")
        )
    )
    server = serve("127.0.0.1:0", Metrics(), caches.listed, caches.not_current)
    try:
        assert get(server.server_address[1], "/healthz")[0] == 503
        assert get(server.server_address[1], "/readyz")[0] == 503
    finally:
        server.shutdown()
