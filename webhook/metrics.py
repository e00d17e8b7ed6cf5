"""Prometheus metrics. Under gunicorn every worker is a process, so prometheus_client runs in
multiprocess mode (PROMETHEUS_MULTIPROC_DIR, set by the server before this module is imported)
and /metrics aggregates all workers."""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from priogate import __version__

# The running version as a label (the build_info convention: join it onto other series with
# `* on(pod) group_left(version)`); "max" merges the workers' equal samples into one.
BUILD_INFO = Gauge(
    "priogate_build_info", "priogate's version, as the label; always 1.", ["version"], multiprocess_mode="max"
)
BUILD_INFO.labels(version=__version__).set(1)

REQUESTS = Counter(
    "priogate_webhook_requests_total",
    "Admission requests answered, by webhook, operation and decision (allow, deny, error).",
    ["webhook", "operation", "decision"],
)
LATENCY = Histogram(
    "priogate_webhook_latency_seconds",
    "Time to answer an admission request, from body read to response built.",
    ["webhook"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
IN_FLIGHT = Gauge(
    "priogate_webhook_requests_in_flight",
    "Admission requests being answered now.",
    ["webhook"],
    multiprocess_mode="livesum",
)
BAD_REQUESTS = Counter(
    "priogate_webhook_bad_requests_total", "Bodies refused with a 4xx before any rule ran.", ["webhook"]
)
CLIENT_TIMEOUTS = Counter(
    "priogate_webhook_client_timeouts_total",
    "Requests answered 408 because a part of their body did not arrive within --client-deadline-seconds.",
)

TLS_EXPIRY = Gauge(
    "priogate_tls_certificate_expiry_timestamp_seconds",
    "When the serving certificate in use expires (Unix time); the earliest across workers. Alert"
    " when it is less than 30 days away: renewal from the Secret should have happened by then.",
    multiprocess_mode="livemin",
)

LEDGER_CONFLICTS = Counter(
    "priogate_ledger_conflicts_total",
    "Ledger writes that lost an optimistic-concurrency race (409) and were retried.",
)

LEDGER_RELAYS = Counter(
    "priogate_ledger_relays_total",
    "Ledger admissions sent on to the replica holding the namespace's ledger turn (--peer-address),"
    " by outcome: answered by it, or failed and decided here.",
    ["outcome"],
)

# One sample per live worker (pid label): the health port's /readyz (webhook/health.py) is ready
# when every configured worker reports 1.
WORKER_READY = Gauge(
    "priogate_webhook_worker_ready",
    "1 while this worker's caches are current enough to answer (the webhook port's /readyz is"
    " 200), else 0; one sample per live worker process.",
    multiprocess_mode="liveall",
)

CACHE_STALE = Gauge(
    "priogate_cache_stale",
    "1 while the cache is not current (not listed yet, or a LIST or WATCH failed or went quiet"
    " since; it keeps its last contents), else 0; the worst across workers.",
    ["cache"],
    multiprocess_mode="livemax",
)
CACHE_LAST_EVENT = Gauge(
    "priogate_cache_last_event_timestamp_seconds",
    "When the cache last heard from the API server (LIST, event or bookmark; Unix time); the"
    " oldest across workers.",
    ["cache"],
    multiprocess_mode="livemin",
)


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
