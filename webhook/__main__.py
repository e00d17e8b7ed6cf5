"""`python -m webhook`: serve the admission webhooks over TLS with gunicorn.

python -m webhook --cert-file tls.crt --key-file tls.key --bind 127.0.0.1:8443 --kubeconfig kubeconfig
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

from priogate import __version__
from priogate.ledger.timing import IN_FLIGHT
from webhook.registry import SERVERS  # imports neither prometheus_client nor the app


def prepare_metrics_dir(directory: Path) -> None:
    """A given PROMETHEUS_MULTIPROC_DIR must exist, and be emptied before the server starts
    (https://prometheus.github.io/client_python/multiprocess/). The manifests name /tmp/metrics
    on an emptyDir that nothing creates it in, and an emptyDir outlives a container restart: the
    files of the previous run's workers would be summed into this run's counters."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m webhook", description="priogate admission webhook server")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument(
        "--bind",
        default=os.environ.get("PRIOGATE_BIND", "0.0.0.0:8443"),
        help="HOST:PORT to listen on; several, comma-separated, to listen on each (default 0.0.0.0:8443)",
    )
    p.add_argument(
        "--health-bind",
        default=os.environ.get("PRIOGATE_HEALTH_BIND") or None,
        help="HOST:PORT of a plain-HTTP port serving /healthz, /readyz and /metrics without TLS, for"
        " kubelet's probes and Prometheus when the webhook port requires client certificates"
        " (docs/serving.md; default: not served)",
    )
    p.add_argument(
        "--reuse-port",
        action="store_true",
        help="listen with SO_REUSEPORT, so several servers on one host share a port and the kernel"
        " spreads connections among them, as a Service spreads them among pods (benchmarks, tests)",
    )
    p.add_argument("--cert-file", default=os.environ.get("PRIOGATE_TLS_CERT", "/etc/priogate/tls/tls.crt"))
    p.add_argument("--key-file", default=os.environ.get("PRIOGATE_TLS_KEY", "/etc/priogate/tls/tls.key"))
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), help="default: in-cluster config")
    p.add_argument(
        "--priorityclasses-file",
        help="serve from this fixed YAML/JSON list of PriorityClasses, not a watch (benchmarks)",
    )
    p.add_argument("--workers", type=int, default=int(os.environ.get("PRIOGATE_WORKERS", "2")))
    p.add_argument(
        "--serve",
        default=os.environ.get("PRIOGATE_SERVE", ",".join(SERVERS)),
        help=f"comma-separated servers whose rule sets to answer, of: {', '.join(SERVERS)} (default: all)",
    )
    threads = os.environ.get("PRIOGATE_THREADS")
    p.add_argument(
        "--threads",
        type=int,
        default=int(threads) if threads else None,
        help="threads per worker (default: " + ", ".join(f"{k} {v}" for k, v in SERVERS.items()) + ")",
    )
    p.add_argument("--log-level", default=os.environ.get("PRIOGATE_LOG_LEVEL", "INFO"))
    p.add_argument(
        "--tls-secret",
        default=os.environ.get("PRIOGATE_TLS_SECRET"),
        help="NAMESPACE/NAME of the Secret the certificate files came from (python -m certs bootstrap):"
        " renew from it before expiry and rewrite the files; they must be DIR/tls.crt and DIR/tls.key",
    )
    p.add_argument(
        "--ledger-namespace",
        default=os.environ.get("PRIOGATE_LEDGER_NAMESPACE")
        or os.environ.get("POD_NAMESPACE")
        or "priogate-system",
        help="priogate's own namespace, where the ledgers live and only priogate may write"
        " (default: $PRIOGATE_LEDGER_NAMESPACE, else $POD_NAMESPACE, else priogate-system)",
    )
    p.add_argument(
        "--in-flight-seconds",
        type=float,
        default=float(os.environ.get("PRIOGATE_IN_FLIGHT_SECONDS", IN_FLIGHT.total_seconds())),
        help="how long an admitted request may take to be stored; an unconfirmed reservation counts"
        f" that long (default {IN_FLIGHT.total_seconds():g}; raise it above the timeoutSeconds of"
        " any other, possibly slow, validating webhook for PodGroups or pods)",
    )
    p.add_argument("--tls-check-seconds", type=float, default=3600.0, help="how often to check the Secret")
    p.add_argument(
        "--cache-quiet-seconds",
        type=float,
        default=os.environ.get("PRIOGATE_CACHE_QUIET_SECONDS", "120"),  # argparse applies type
        help="restart a watch that heard nothing, not even a bookmark, for this long; its cache is"
        " stale (quota hooks refuse with 'retry', /readyz fails) until a list or watch succeeds."
        " kube-apiserver sends bookmarks about every 60 s: keep it above that (default 120)",
    )
    p.add_argument(
        "--controller-username",
        default=os.environ.get("PRIOGATE_CONTROLLER_USERNAME"),
        help="the only user allowed to write priogate.io/ annotations on PodGroups "
        "(default: system:serviceaccount:priogate-system:priogate-controller)",
    )
    p.add_argument(
        "--client-ca-file",
        default=os.environ.get("PRIOGATE_CLIENT_CA_FILE") or None,
        help="PEM CA bundle: require every client (kube-apiserver) to present a certificate signed by"
        " it; reloaded when the file changes (docs/hardening.md)",
    )
    deadline = os.environ.get("PRIOGATE_CLIENT_DEADLINE_SECONDS")
    p.add_argument(
        "--client-deadline-seconds",
        type=float,
        default=float(deadline) if deadline else 10.0,
        help="how long to wait for each part of a request's body before answering 408 (default: 10)",
    )
    p.add_argument(
        "--peer-address",
        default=os.environ.get("PRIOGATE_PEER_ADDRESS") or None,
        help="HOST:PORT where the other replicas reach this server's admission port (the pod's IP):"
        " a quota server relays ledger admissions to the replica holding the namespace's ledger"
        " turn instead of racing it (docs/ledger.md; default: none)",
    )
    args = p.parse_args(argv)
    if not (0 < args.cache_quiet_seconds < math.inf):
        p.error(f"--cache-quiet-seconds {args.cache_quiet_seconds}: give a number of seconds above 0")
    if args.controller_username:
        # Read by webhook/rules/podgroup_annotations.py in every worker (they inherit it).
        os.environ["PRIOGATE_CONTROLLER_USERNAME"] = args.controller_username
    if args.tls_secret:
        namespace, _, name = args.tls_secret.partition("/")
        if not namespace or not name:
            p.error(f"--tls-secret {args.tls_secret!r}: give NAMESPACE/NAME")
        cert, key = Path(args.cert_file), Path(args.key_file)
        if (cert.name, key.name) != ("tls.crt", "tls.key") or cert.parent != key.parent:
            p.error(
                "--tls-secret rewrites DIR/tls.crt and DIR/tls.key: point --cert-file and --key-file there"
            )
    if not any(address.strip() for address in args.bind.split(",")):
        p.error(f"--bind {args.bind!r}: give HOST:PORT, or several comma-separated")
    if args.peer_address:
        from priogate.ledger.turn_order import peer_of

        if peer_of(args.peer_address + "/") is None or any(c.isspace() for c in args.peer_address):
            p.error(f"--peer-address {args.peer_address!r}: give HOST:PORT")
    if args.health_bind:
        from webhook.health import parse_bind

        try:
            parse_bind(args.health_bind)
        except ValueError as e:
            p.error(f"--health-bind {e}")
    servers = tuple(s.strip() for s in args.serve.split(",") if s.strip())
    if not servers or set(servers) - set(SERVERS):
        p.error(f"--serve {args.serve!r}: give one or more of {', '.join(SERVERS)}, comma-separated")
    for f in (args.cert_file, args.key_file):
        if not Path(f).is_file():
            p.error(f"{f} does not exist; issue a certificate first: python -m certs --out DIR")
    if args.client_ca_file and not Path(args.client_ca_file).is_file():
        p.error(f"--client-ca-file {args.client_ca_file} does not exist")
    if args.client_deadline_seconds <= 0:
        p.error("--client-deadline-seconds must be positive")
    # Multiprocess metrics need a directory shared by all workers, set before prometheus_client loads.
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="priogate-metrics-")
    else:
        prepare_metrics_dir(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    from priogate.logs import configure_logging
    from webhook.server import ServerOptions, WebhookServer

    configure_logging(args.log_level)
    options = ServerOptions(
        bind=args.bind,
        reuse_port=args.reuse_port,
        cert_file=args.cert_file,
        key_file=args.key_file,
        kubeconfig=args.kubeconfig,
        workers=args.workers,
        priorityclasses_file=args.priorityclasses_file,
        threads=args.threads,
        servers=servers,
        tls_secret=args.tls_secret,
        tls_check_seconds=args.tls_check_seconds,
        ledger_namespace=args.ledger_namespace,
        in_flight_seconds=args.in_flight_seconds,
        cache_quiet_seconds=args.cache_quiet_seconds,
        client_ca_file=args.client_ca_file,
        client_deadline_seconds=args.client_deadline_seconds,
        health_bind=args.health_bind,
        peer_address=args.peer_address,
    )
    WebhookServer(options).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
