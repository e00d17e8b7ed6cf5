"""The plain-HTTP health and metrics port (--health-bind), served by gunicorn's master process.

With mutual TLS on the webhook port (docs/hardening.md) neither kubelet's probes nor Prometheus
hold a client certificate kube-apiserver's CA signed, so /readyz (stale caches) and /metrics
would be out of their reach. Nothing secret is served here, so it needs no TLS:

* /healthz: 200 while the master answers (gunicorn itself restarts a worker that dies or stops
  heart-beating: its `timeout` setting);
* /readyz: 200 only when every configured worker is alive and reports its caches current
  (each worker sets WORKER_READY, webhook/metrics.py, from the same check as the webhook port's
  /readyz); else 503, with why in the body;
* /metrics: every worker's metrics, as the webhook port's /metrics (multiprocess registry).

Only GET; any other method is 405, any other path 404. Each connection is bounded: one request
(HTTP/1.0, no keep-alive), a deadline on every socket call, and a cap on the connections served
at once, so a slow or flooding client can neither hang the probes nor pile up threads.

The server runs on a thread of gunicorn's master, started from its documented `when_ready`
server hook (https://docs.gunicorn.org/en/stable/settings.html#when-ready); workers close their
inherited copy of the listening socket in `post_fork`. The master never imports webhook.metrics
(its metrics would then be a process of their own): it reads the workers' files only.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The gauge each worker sets (webhook/metrics.py declares it; named here so that the master need
# not import that module).
WORKER_READY = "priogate_webhook_worker_ready"

DEADLINE_SECONDS = 5.0
MAX_CONNECTIONS = 16


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str


def readiness(samples: dict[str, float], workers: int) -> Readiness:
    """`samples`: pid -> the WORKER_READY value of each live worker. Ready when all `workers`
    report, each ready: a worker still loading its caches (or just restarted) has not reported,
    and the kernel would give it connections it would refuse with "retry"."""
    not_ready = sorted(pid for pid, v in samples.items() if v < 1)
    if not_ready:
        return Readiness(False, f"workers not ready (caches not current): {', '.join(not_ready)}")
    if len(samples) < workers:
        return Readiness(False, f"{len(samples)} of {workers} workers ready")
    return Readiness(True, "ok")


def multiprocess_readiness(workers: int) -> Readiness:
    samples = {}
    for metric in _collect():
        if metric.name == WORKER_READY:
            samples = {s.labels.get("pid", ""): s.value for s in metric.samples}
    return readiness(samples, workers)


def _collect() -> list[Any]:
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return list(registry.collect())


def multiprocess_metrics() -> tuple[bytes, str]:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def _method_not_allowed(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(405)
    handler.send_header("Allow", "GET")
    body = b"method not allowed\n"
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def handler_class(
    ready: Callable[[], Readiness], metrics: Callable[[], tuple[bytes, str]], deadline: float
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # StreamRequestHandler puts this timeout on the connection: every read and write.
        timeout = deadline
        server_version = "priogate-health"
        sys_version = ""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                r = ready()
                self._send(200 if r.ready else 503, f"{r.reason}\n".encode(), "text/plain")
            elif path == "/metrics":
                body, content_type = metrics()
                self._send(200, body, content_type)
            else:
                self._send(404, b"not found; paths are /healthz, /readyz, /metrics\n", "text/plain")

        def __getattr__(self, name: str) -> Any:
            # BaseHTTPRequestHandler answers a method without a do_<METHOD> with 501; every
            # method but GET is a 405 here.
            if name.startswith("do_"):
                return lambda: _method_not_allowed(self)
            raise AttributeError(name)

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # probes every few seconds would drown the log

    return Handler


class BoundedServer(ThreadingHTTPServer):
    """At most `max_connections` served at once; a connection beyond them is closed at once."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def parse_bind(bind: str) -> tuple[str, int]:
    host, sep, port = bind.strip().rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{bind!r}: give HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(
    bind: str,
    ready: Callable[[], Readiness],
    metrics: Callable[[], tuple[bytes, str]] = multiprocess_metrics,
    deadline: float = DEADLINE_SECONDS,
    max_connections: int = MAX_CONNECTIONS,
) -> BoundedServer:
    host, port = parse_bind(bind)
    server = BoundedServer((host, port), handler_class(ready, metrics, deadline), max_connections)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


class HealthHooks:
    """gunicorn server hooks (when_ready, post_fork) that run the health port in the master."""

    def __init__(self, bind: str, workers: int) -> None:
        self.bind = bind
        self.workers = workers
        self.server: BoundedServer | None = None

    def when_ready(self, arbiter: Any) -> None:
        if self.server is not None:
            return  # a reload (SIGHUP) runs the hook again; the port is still served
        # prometheus_client imported now, before any fork: no import runs on the health thread
        # while gunicorn forks a worker.
        multiprocess_readiness(self.workers)
        self.server = serve(self.bind, lambda: multiprocess_readiness(self.workers))
        arbiter.log.info("health and metrics on http://%s", self.bind)

    def post_fork(self, _arbiter: Any, _worker: Any) -> None:
        # The worker inherited the listening socket with the fork; only the master accepts on it.
        if self.server is not None:
            self.server.socket.close()
