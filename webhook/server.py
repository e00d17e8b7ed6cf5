"""gunicorn serving: TLS with a cached, hot-reloading SSL context, gthread workers, and one set
of watch-backed caches per worker process (threads do not survive fork)."""

from __future__ import annotations

import gc
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from gunicorn.app.base import BaseApplication

log = structlog.get_logger("priogate.server")


# Threads per worker. The priority path is pure CPU under the GIL: beyond a few threads, requests
# only queue for the GIL in 5 ms switch intervals (p99 28 to 40 ms with 8 threads at 8 busy
# connections, against 8 to 15 ms with 2 to 4). The quota paths block on ledger writes, but
# concurrent writes of a namespace share one batch, so a handful of threads keeps them busy.
DEFAULT_THREADS = 4


@dataclass
class ServerOptions:
    bind: str
    cert_file: str
    key_file: str
    kubeconfig: str | None
    priorityclasses_file: str | None = None
    workers: int = 2
    threads: int = DEFAULT_THREADS
    # kube-apiserver keeps idle connections for 90 s; closing earlier churns TLS handshakes and
    # races requests against the close.
    keepalive: int = 120
    graceful_timeout: int = 20


class _ContextCache:
    """Builds the server SSLContext once, and again only when the certificate or key changes on
    disk, so a rotated certificate is served from the next connection without a restart."""

    def __init__(self) -> None:
        self._key: tuple[Any, ...] | None = None
        self._context: ssl.SSLContext | None = None

    def __call__(self, conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        stats = tuple(
            (s.st_mtime_ns, s.st_size, s.st_ino) for s in map(os.stat, (conf.certfile, conf.keyfile))
        )
        if self._context is None or stats != self._key:
            context = default_factory()
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            self._context, self._key = context, stats
            log.info("tls context loaded", certfile=conf.certfile)
        return self._context


def build_view(kubeconfig: str | None, priorityclasses_file: str | None = None) -> Any:
    """Caches for what the registered rule sets need, started in this worker."""
    from priogate.kube.cache import WatchCache
    from priogate.kube.client import load_client
    from priogate.kube.ledger_store import LedgerStore
    from priogate.ledger import MemoryLedgerStore
    from webhook.metrics import LEDGER_CONFLICTS
    from webhook.registry import load_rule_sets
    from webhook.view import CACHE_SOURCES, CacheView

    needed = sorted({name for rule_set in load_rule_sets() for name in rule_set.needs})
    if priorityclasses_file:
        # Offline: fixed PriorityClasses, empty everything else, the ledger in this process.
        classes = _load_list(priorityclasses_file)
        caches = {n: WatchCache.static(n, classes if n == "priorityclasses" else []) for n in needed}
        return CacheView(caches, MemoryLedgerStore())
    client = load_client(kubeconfig)
    caches = {}
    for name in needed:
        path, selectors = CACHE_SOURCES[name]
        caches[name] = WatchCache(client, path, name, selectors=selectors).start()
    return CacheView(caches, LedgerStore(client, on_conflict=LEDGER_CONFLICTS.inc))


class WebhookServer(BaseApplication):
    def __init__(self, options: ServerOptions, app_factory: Callable[[], Any] | None = None) -> None:
        self.options = options
        self.app_factory = app_factory
        super().__init__()

    def load_config(self) -> None:
        o = self.options
        settings = {
            "bind": o.bind,
            "workers": o.workers,
            "worker_class": "gthread",
            "threads": o.threads,
            "keepalive": o.keepalive,
            "graceful_timeout": o.graceful_timeout,
            "timeout": 30,
            "certfile": o.cert_file,
            "keyfile": o.key_file,
            "ssl_context": _ContextCache(),
            "child_exit": _child_exit,
            "accesslog": None,
            "loglevel": "warning",
            "proc_name": "priogate-webhook",
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Runs in each worker after fork: caches and their watch threads belong to the worker.
        if self.app_factory is not None:
            app = self.app_factory()
        else:
            from webhook.app import create_app

            app = create_app(build_view(self.options.kubeconfig, self.options.priorityclasses_file))
        # Everything imported so far (the kubernetes client alone is ~100k objects) lives as long
        # as the worker: take it out of the collector's view, so full collections stay short and
        # do not show up as p99 latency spikes.
        gc.freeze()
        return app


def _load_list(path: str) -> list[dict]:
    import yaml

    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    items: list[dict] = []
    for doc in docs:
        items.extend(doc.get("items", []) if doc.get("kind", "").endswith("List") else [doc])
    return items


def _child_exit(_server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
