"""/healthz, /readyz and /metrics on a plain HTTP port (no TLS: nothing secret is served).

/healthz (liveness) says the caches listed once: a process whose API server is away is not
broken, and restarting it would not bring the server back. /readyz says every cache is current;
while one is stale the worker holds its keys, and the reason is the answer's body."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from priogate import __version__


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.build_info = Gauge(
            "priogate_build_info",
            "priogate's version, as the label; always 1.",
            ["version"],
            registry=self.registry,
        )
        self.build_info.labels(version=__version__).set(1)
        self.reconciles = Counter(
            "priogate_controller_reconciles",
            "Reconciles by kind (podgroup, ledger) and result",
            ["kind", "result"],
            registry=self.registry,
        )
        self.preemptions = Counter(
            "priogate_controller_preemptions", "Gang preemption decisions applied", registry=self.registry
        )
        self.victims = Counter(
            "priogate_controller_preemption_victims", "Pods preempted for gangs", registry=self.registry
        )
        self.extender_answers = Counter(
            "priogate_extender_answers",
            "Answers of the preempt extender to kube-scheduler, by result (unchanged, shaped,"
            " dropped-all, bad-request)",
            ["result"],
            registry=self.registry,
        )
        # kube-scheduler waits for the answer on its scheduling path: its httpTimeout bounds it.
        self.extender_seconds = Histogram(
            "priogate_extender_answer_seconds",
            "Time to answer one preempt extender call",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.leader = Gauge(
            "priogate_controller_leader",
            "1 while this process holds the leader lease",
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "priogate_controller_queue_depth", "Keys waiting in the work queue", registry=self.registry
        )
        self.cache_stale = Gauge(
            "priogate_cache_stale",
            "1 while the cache is not current (not listed yet, or a LIST or WATCH failed or went"
            " quiet since; it keeps its last contents), else 0",
            ["cache"],
            registry=self.registry,
        )
        # Per tenant namespace (not `namespace`, which Prometheus gives the scraped pod's): how
        # full its ledger is; past priogate.ledger.codec.CONFIGMAP_MAX_BYTES, claims are refused.
        self.ledger_bytes = Gauge(
            "priogate_ledger_bytes",
            "Bytes a namespace's ledger holds, as kube-apiserver counts them against a"
            " ConfigMap's limit of 1 MiB; past it, PodGroups that claim more are refused",
            ["tenant_namespace"],
            registry=self.registry,
        )
        self.cache_last_event = Gauge(
            "priogate_cache_last_event_timestamp_seconds",
            "When the cache last heard from the API server (LIST, event or bookmark; Unix time)",
            ["cache"],
            registry=self.registry,
        )


def serve(
    bind: str, metrics: Metrics, healthy: Callable[[], bool], not_ready: Callable[[], list[str]]
) -> ThreadingHTTPServer:
    """`not_ready()`: why the process is not ready (one line each), empty when it is."""
    host, _, port = bind.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                ok = healthy()
                self._send(200 if ok else 503, b"ok\n" if ok else b"caches not synced\n", "text/plain")
            elif self.path == "/readyz":
                reasons = not_ready()
                body = "".join(f"cache {r}\n" for r in reasons) if reasons else "ok\n"
                self._send(503 if reasons else 200, body.encode(), "text/plain")
            elif self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # probes every few seconds would drown the JSON log

    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
