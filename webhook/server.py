"""gunicorn serving with the asyncio worker it ships (worker class `asgi`; docs/serving.md): TLS
with an SSL context whose certificate is reloaded in place when its files change, optionally
requiring client certificates, and one set of watch-backed caches per worker process (threads do
not survive fork). webhook/asgi.py is the app it serves."""

from __future__ import annotations

import datetime as dt
import gc
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from gunicorn.app.base import BaseApplication

from certs.files import leaf_pem
from priogate.ledger.timing import IN_FLIGHT
from webhook.registry import default_threads

log = structlog.get_logger("priogate.server")

# TLS 1.2: ECDHE key exchange (forward secrecy) with AEAD ciphers only, no CBC; Go's client, and so
# kube-apiserver's, offers these first (crypto/tls defaults). TLS 1.3 suites are all AEAD and are
# not affected by this list.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"

# How long the app waits for each part of a request body (--client-deadline-seconds).
DEFAULT_CLIENT_DEADLINE_SECONDS = 10.0


@dataclass
class ServerOptions:
    bind: str  # HOST:PORT, or several comma-separated
    cert_file: str
    key_file: str
    kubeconfig: str | None
    priorityclasses_file: str | None = None
    # Which servers' rule sets to answer (webhook.registry.SERVERS); all of them by default.
    servers: tuple[str, ...] = ("priority", "quota")
    # "namespace/name" of the Secret the certificate files came from: when set, each worker
    # renews from it before expiry and rewrites the files, which the TLS context then reloads.
    tls_secret: str | None = None
    tls_check_seconds: float = 3600.0
    # Where the ledgers live (priogate's own namespace), and the in-flight bound
    # (priogate.ledger.model.IN_FLIGHT says what it is).
    ledger_namespace: str = "priogate-system"
    in_flight_seconds: float = IN_FLIGHT.total_seconds()
    # A watch that hears nothing, not even a bookmark, for this long is restarted and its cache
    # is stale meanwhile (priogate.kube.cache.DEFAULT_QUIET_SECONDS says why the default).
    cache_quiet_seconds: float = 120.0
    workers: int = 2
    threads: int | None = None  # None: what the served rule sets want (registry.default_threads)
    # kube-apiserver keeps idle connections for 90 s (Go net/http DefaultTransport's
    # IdleConnTimeout, which k8s.io/apimachinery/pkg/util/net SetTransportDefaults applies);
    # closing earlier churns TLS handshakes and races requests against the close.
    keepalive: int = 120
    # A stopping worker serves what it has in flight, and what arrives on connections still open,
    # this long. The asyncio worker waits for every connection to close, and kube-apiserver keeps
    # idle ones open, so a stop takes all of it: the longest hook timeout (10 s) and no more.
    graceful_timeout: int = 10
    # PEM CA bundle: require a client certificate signed by it (mutual TLS; docs/hardening.md).
    client_ca_file: str | None = None
    # How long the app waits for each part of a request's body before it answers 408
    # (webhook/asgi.py).
    client_deadline_seconds: float = DEFAULT_CLIENT_DEADLINE_SECONDS
    # SO_REUSEPORT: several servers on one host share a port, the kernel spreading connections
    # among them (in a cluster each pod has its own address, so this is for benchmarks and tests).
    reuse_port: bool = False
    # HOST:PORT of the plain-HTTP /healthz, /readyz and /metrics (webhook/health.py), served by
    # the master apart from the TLS port; None: not served.
    health_bind: str | None = None
    # HOST:PORT where the other replicas reach this server's admission port (its pod's address):
    # ledger admissions are relayed to the replica holding the namespace's ledger turn
    # (webhook/ledger_relay.py). None: no relaying.
    peer_address: str | None = None


class _ContextCache:
    """The server SSLContext: built once, from gunicorn's own factory (which applies ca_certs and
    cert_reqs), at the first call; on later calls, and on refresh(), the certificate and key, or
    the client CA bundle, are loaded again into the same context when their files changed, so a
    rotated certificate is served from the next handshake without a restart. gunicorn's asyncio
    worker asks for the context once, when it starts listening, and keeps it: the context must
    change in place. refresh() runs on the worker's event loop (webhook/asgi.py), where the
    handshakes that read the context are made.

    A CA taken out of the client CA bundle stays trusted until the worker restarts: OpenSSL can
    add trust anchors to a context, not remove them."""

    def __init__(self) -> None:
        self._stats: tuple[Any, ...] | None = None
        self._context: ssl.SSLContext | None = None
        self._conf: Any = None

    def __call__(self, conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        if self._context is None:
            stats = self._file_stats(conf)
            context = default_factory()
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_ciphers(TLS12_CIPHERS)
            if conf.ca_certs:
                _trust_own_certificate(context, conf.certfile)
            self._context, self._stats, self._conf = context, stats, conf
            self._loaded()
        else:
            self.refresh()
        return self._context

    @staticmethod
    def _file_stats(conf: Any) -> tuple[Any, ...]:
        files = (conf.certfile, conf.keyfile, *((conf.ca_certs,) if conf.ca_certs else ()))
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in map(os.stat, files))

    def refresh(self) -> None:
        """Load what changed on disk into the context; keep what it has when the files cannot be
        loaded yet (a new key beside the old certificate, mid-rotation): the next refresh tries
        again."""
        if self._context is None:
            return
        conf = self._conf
        try:
            stats = self._file_stats(conf)
            if stats == self._stats:
                return
            assert self._stats is not None
            if stats[:2] != self._stats[:2]:
                self._context.load_cert_chain(conf.certfile, conf.keyfile)
                if conf.ca_certs:
                    _trust_own_certificate(self._context, conf.certfile)
            if stats[2:] != self._stats[2:]:
                self._context.load_verify_locations(cafile=conf.ca_certs)
                log.warning(
                    "client CA bundle reloaded: CAs added to it are trusted now; one taken out"
                    " stays trusted until the webhook restarts",
                    cafile=conf.ca_certs,
                )
        except (ssl.SSLError, OSError) as e:
            log.warning("tls files not loadable yet; serving the previous certificate", error=str(e))
            return
        self._stats = stats
        self._loaded()

    def _loaded(self) -> None:
        expires = _not_after(self._conf.certfile)
        log.info("tls context loaded", certfile=self._conf.certfile, expires=expires.isoformat())
        from webhook.metrics import TLS_EXPIRY  # after PROMETHEUS_MULTIPROC_DIR is set

        TLS_EXPIRY.set(expires.timestamp())


def _trust_own_certificate(context: ssl.SSLContext, cert_file: str) -> None:
    """With client certificates required: accept also a client presenting this server's own
    certificate, the leaf alone (a partial chain ending at it; not whatever its CA signed). It is
    how replicas, which all mount the serving Secret, relay ledger admissions to each other
    (webhook/ledger_relay.py); holding its key already lets one serve as the webhook. A
    certificate rotated out stays trusted until the worker restarts, as a CA taken out of the
    bundle does."""
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.load_verify_locations(cadata=leaf_pem(cert_file))


def _not_after(cert_file: str) -> dt.datetime:
    from cryptography import x509

    with open(cert_file, "rb") as f:
        return x509.load_pem_x509_certificate(f.read()).not_valid_after_utc


def build_view(
    kubeconfig: str | None,
    priorityclasses_file: str | None = None,
    servers: tuple[str, ...] | None = None,
    ledger_namespace: str = "priogate-system",
    in_flight_seconds: float = IN_FLIGHT.total_seconds(),
    quiet_seconds: float = 120.0,
    peer_address: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> Any:
    """Caches for what the served rule sets need, started in this worker."""
    from priogate.kube.cache import CacheState, WatchCache
    from priogate.kube.client import load_client
    from priogate.kube.ledger_store import LedgerStore
    from priogate.kube.watched_ledger import WatchedLedgers
    from webhook.metrics import CACHE_LAST_EVENT, CACHE_STALE, LEDGER_CONFLICTS
    from webhook.preview_state import PREVIEW_CACHES, PreviewState
    from webhook.registry import load_rule_sets
    from webhook.view import CacheView, memory_view, sources

    in_flight = dt.timedelta(seconds=in_flight_seconds)
    needed = sorted({name for rule_set in load_rule_sets(servers=servers) for name in rule_set.needs})
    if priorityclasses_file:
        # Offline: fixed PriorityClasses, empty everything else, the ledger in this process.
        classes = _load_list(priorityclasses_file)
        caches = {n: WatchCache.static(n, classes if n == "priorityclasses" else []) for n in needed}
        return memory_view(caches, ledger_namespace=ledger_namespace, in_flight=in_flight)
    client = load_client(kubeconfig)

    def export(state: CacheState) -> None:
        CACHE_STALE.labels(state.name).set(0 if state.synced else 1)
        CACHE_LAST_EVENT.labels(state.name).set(state.last_event)

    caches = {}
    catalogue = sources(ledger_namespace)
    for name in needed:
        source, transform = catalogue[name]
        cache = source.cache(client, transform=transform, quiet_seconds=quiet_seconds)
        cache.on_state = export
        export(cache.state())
        caches[name] = cache
    # The preemption preview's engine state follows its caches' events from their first LIST.
    preview = PreviewState.attach(caches) if all(n in caches for n in PREVIEW_CACHES) else None
    for cache in caches.values():
        cache.start()
    # Where the ledgers are watched (the pod quota rule set reads them, so the quota server
    # does), turns start from that copy. Not a need of the PodGroup rule sets: the copy only
    # saves a GET, so a stale watch of the ledgers must not refuse their admissions.
    watched = (
        WatchedLedgers(caches["ledgers"], ledger_namespace, peer_address=peer_address)
        if "ledgers" in caches
        else None
    )
    store = LedgerStore(
        client,
        ledger_namespace=ledger_namespace,
        in_flight=in_flight,
        on_conflict=LEDGER_CONFLICTS.inc,
        watched=watched,
    )
    view = CacheView(
        caches, store, client, ledger_namespace=ledger_namespace, in_flight=in_flight, preview=preview
    )
    if watched is not None and "podgroups" in caches:
        view.follow_stored_groups()  # the quota server's: every PodGroup admission reads them
    if watched is not None and peer_address and cert_file and key_file:
        from webhook.ledger_relay import LedgerRelay

        view.relay = LedgerRelay(watched.writer_of, cert_file, key_file, holds_a_turn=watched.holds_a_turn)
    return view


class WebhookServer(BaseApplication):
    def __init__(self, options: ServerOptions, app_factory: Callable[[], Any] | None = None) -> None:
        self.options = options
        self.app_factory = app_factory
        super().__init__()

    def load_config(self) -> None:
        o = self.options
        settings = {
            "bind": [address.strip() for address in o.bind.split(",") if address.strip()],
            "reuse_port": o.reuse_port,
            "workers": o.workers,
            # gunicorn's own asyncio worker: one event loop reads and writes every connection
            # (https://docs.gunicorn.org/en/stable/asgi.html); the app hands what may block to
            # its threads (webhook/asgi.py).
            "worker_class": "asgi",
            "asgi_loop": "asyncio",
            "asgi_lifespan": "on",
            # kube-apiserver calls webhooks over HTTP/1.1.
            "http_protocols": "h1",
            # The pure-Python HTTP parser gunicorn ships, also where its optional C parser happens
            # to be installed (http_parser "auto" would pick it up), so every environment serves,
            # and measures, the same code.
            "http_parser": "python",
            "keepalive": o.keepalive,
            "graceful_timeout": o.graceful_timeout,
            "timeout": 30,
            "certfile": o.cert_file,
            "keyfile": o.key_file,
            "ssl_context": _ContextCache(),
            # gunicorn's documented settings; its default context factory applies them
            # (create_default_context(cafile=ca_certs), verify_mode = cert_reqs).
            "ca_certs": o.client_ca_file,
            "cert_reqs": ssl.CERT_REQUIRED if o.client_ca_file else ssl.CERT_NONE,
            "child_exit": _child_exit,
            # No proxy stands between kube-apiserver and the webhook, so no forwarding or scheme
            # header is ever honoured (gunicorn's defaults honour X-Forwarded-Proto and friends
            # from loopback peers). With nothing to honour, every peer may be "trusted": gunicorn
            # then skips parsing the peer's address against the allow list on every request
            # (gunicorn/http/message.py HeaderPolicy._peer_trusted_for_forwarded).
            "forwarder_headers": "",
            "secure_scheme_headers": {},
            "forwarded_allow_ips": "*",
            "accesslog": None,
            "loglevel": "warning",
            "proc_name": "priogate-webhook",
            # gunicorn >= 25.1 opens a control socket (for gunicornc) under $HOME/.gunicorn unless
            # told not to; nothing here uses it, and in the image (uid 65532, HOME=/, read-only
            # root) creating it fails with an error at every start.
            # https://docs.gunicorn.org/en/stable/settings.html#control-socket-disable
            "control_socket_disable": True,
        }
        if o.health_bind:
            from webhook.health import HealthHooks

            # gunicorn's documented server hooks
            # (https://docs.gunicorn.org/en/stable/settings.html#server-hooks).
            hooks = HealthHooks(o.health_bind, o.workers)
            settings["when_ready"] = hooks.when_ready
            settings["post_fork"] = hooks.post_fork
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Runs in each worker after fork: caches and their watch threads belong to the worker.
        o = self.options
        from webhook.metrics import TLS_EXPIRY

        # First thing: a worker's metrics file exists from here on, and until its first
        # connection builds the TLS context it reports the file's expiry, never a 0.
        TLS_EXPIRY.set(_not_after(o.cert_file).timestamp())
        inline: Callable[[str], bool] = lambda _path: False  # noqa: E731
        if self.app_factory is not None:
            app = self.app_factory()
        else:
            from webhook.app import create_app
            from webhook.registry import load_rule_sets

            view = build_view(
                o.kubeconfig,
                o.priorityclasses_file,
                o.servers,
                o.ledger_namespace,
                o.in_flight_seconds,
                o.cache_quiet_seconds,
                peer_address=o.peer_address,
                cert_file=o.cert_file,
                key_file=o.key_file,
            )
            rule_sets = load_rule_sets(servers=o.servers)
            app = create_app(view, rule_sets)
            inline = _inline_paths(view, rule_sets)
        _report_readiness(app)
        if o.tls_secret:
            from certs.rotation import start_rotation
            from priogate.kube.client import load_client

            namespace, _, secret = o.tls_secret.partition("/")
            client = load_client(o.kubeconfig)
            out = Path(o.cert_file).parent
            start_rotation(client, namespace, secret, out, interval_seconds=o.tls_check_seconds)
        # Everything imported so far (the kubernetes client alone is a great many objects) lives
        # as long as the worker: take it out of the collector's view, so full collections stay
        # short and do not show up as latency spikes.
        gc.freeze()
        from webhook.asgi import AsgiApp

        return AsgiApp(
            app.wsgi_app,
            inline,
            threads=o.threads or default_threads(o.servers),
            body_seconds=o.client_deadline_seconds,
            every_second=[self.cfg.ssl_context.refresh],
        )


def _inline_paths(view: Any, rule_sets: Any) -> Callable[[str], bool]:
    """Whether an admission POSTed to a path is first tried on the event loop: its rule set is a
    priority one (CPU only over the caches) and its caches are current. Where it would wait
    after all (for the API server, or for a cache), it is answered again on a thread
    (webhook/loop.py); the check on the caches only spares that second try while they are not."""
    needs = {r.path: tuple(r.needs) for r in rule_sets if r.server == "priority"}

    def inline(path: str) -> bool:
        needed = needs.get(path)
        return needed is not None and not view.unsynced(needed)

    return inline


def _load_list(path: str) -> list[dict]:
    import yaml

    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    items: list[dict] = []
    for doc in docs:
        items.extend(doc.get("items", []) if doc.get("kind", "").endswith("List") else [doc])
    return items


READINESS_INTERVAL_SECONDS = 1.0


def _report_readiness(app: Any) -> None:
    """Keep this worker's WORKER_READY sample at what its /readyz answers, for the health port
    in the master (webhook/health.py). Checked every second on a thread of the worker: the
    check reads the caches' states only, and kubelet probes every few seconds."""
    import threading

    from webhook.app import READINESS
    from webhook.metrics import WORKER_READY

    extensions = getattr(app, "extensions", {})
    check = extensions.get(READINESS)
    if check is None:  # an app without caches (tests' app_factory): ready once loaded
        WORKER_READY.set(1)
        return
    WORKER_READY.set(1 if check()[0] == 200 else 0)

    def loop() -> None:
        while True:
            try:
                WORKER_READY.set(1 if check()[0] == 200 else 0)
            except Exception:  # never let the reporter die: readiness would freeze
                log.exception("readiness check failed")
                WORKER_READY.set(0)
            time.sleep(READINESS_INTERVAL_SECONDS)

    threading.Thread(target=loop, name="readiness-report", daemon=True).start()


def _child_exit(_server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
