"""`python -m controller run`'s flags (the Helm chart's values.yaml lists them from here)."""

from __future__ import annotations

import argparse
import math
import os

from priogate.enqueue import ENQUEUE_ORDERS
from priogate.gate import DEFAULT_ORPHAN_SECONDS
from priogate.lease import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD
from priogate.ledger.timing import IN_FLIGHT
from priogate.preemption import policy as preemption_policy
from priogate.preemption_record import DEFAULT_MAX_AGE, DEFAULT_RETRY_AFTER


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, else in-cluster)"
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect a leader (default on)",
    )
    p.add_argument("--leader-elect-namespace", default="priogate-system", help="namespace of the Lease")
    p.add_argument("--leader-elect-name", default="priogate-controller", help="name of the Lease")
    p.add_argument(
        "--leader-elect-identity", default=None, help="holderIdentity (default: hostname + suffix)"
    )
    p.add_argument("--lease-duration", type=float, default=LEASE_DURATION, help="seconds (default 15)")
    p.add_argument("--renew-deadline", type=float, default=RENEW_DEADLINE, help="seconds (default 10)")
    p.add_argument("--retry-period", type=float, default=RETRY_PERIOD, help="seconds (default 2)")
    p.add_argument(
        "--bind", default="0.0.0.0:8080", help="/healthz and /metrics address (default 0.0.0.0:8080)"
    )
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=10.0,
        help="re-reconcile unfinished groups, and check the PriorityClass table, this often",
    )
    p.add_argument("--reclaim-seconds", type=float, default=30.0, help="sweep every ledger this often")
    p.add_argument(
        "--in-flight-seconds",
        type=float,
        default=IN_FLIGHT.total_seconds(),
        help="how long an admitted PodGroup may take to be stored; an entry whose group is not"
        f" stored counts that long (the webhook's --in-flight-seconds;"
        f" default {IN_FLIGHT.total_seconds():g})",
    )
    p.add_argument(
        "--ledger-namespace",
        default=os.environ.get("POD_NAMESPACE") or "priogate-system",
        help="priogate's own namespace, where the ledgers live"
        " (default: $POD_NAMESPACE, else priogate-system)",
    )
    p.add_argument(
        "--cache-quiet-seconds",
        type=_positive_seconds,
        default=120.0,
        help="restart a watch that heard nothing, not even a bookmark, for this long; the cache is stale"
        " (/readyz fails, the worker waits) until a list or watch succeeds. kube-apiserver sends"
        " bookmarks about every 60 s: keep it above that (default 120)",
    )
    p.add_argument("--gang-preemption", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--pod-preemption",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve kube-scheduler's preempt extender on --extender-bind, so priogate's preemption"
        " policies shape kube-scheduler's single-pod preemption (the preemptor mode: run"
        " kube-scheduler with manifests/scheduler/'s profile; default off)",
    )
    p.add_argument(
        "--extender-bind",
        default="0.0.0.0:8443",
        help="HTTPS address of the preempt extender, POST /scheduler/preempt (with --pod-preemption;"
        " default 0.0.0.0:8443)",
    )
    p.add_argument(
        "--cert-file",
        default=os.environ.get("PRIOGATE_TLS_CERT", "/etc/priogate/tls/tls.crt"),
        help="the extender's serving certificate, reloaded when it changes (as the webhook's)",
    )
    p.add_argument(
        "--key-file",
        default=os.environ.get("PRIOGATE_TLS_KEY", "/etc/priogate/tls/tls.key"),
        help="the extender's private key",
    )
    preemption_policy.add_arguments(p)
    p.add_argument(
        "--preemption-retry-seconds",
        type=float,
        default=DEFAULT_RETRY_AFTER,
        help="wait this long after a gang preemption before deciding another for the same group",
    )
    p.add_argument(
        "--preemption-record-max-age",
        type=float,
        default=DEFAULT_MAX_AGE,
        help="never act on a preemption record older than this many seconds (default 300)",
    )
    p.add_argument(
        "--inqueue-timeout",
        type=float,
        default=300.0,
        help="seconds an Inqueue group may stay with no member bound, members unschedulable and no "
        "preemption possible before it goes back to Pending (0: never)",
    )
    p.add_argument(
        "--enqueue-backoff",
        type=float,
        default=60.0,
        help="seconds a group rolled back by --inqueue-timeout waits before it may be enqueued again",
    )
    p.add_argument(
        "--enqueue",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the Delay Pod Creation wait: a PodGroup goes Inqueue only when its minResources fit "
        "its quota and the cluster, and its members' scheduling gate is lifted then; --no-enqueue "
        "admits every group at once (the behaviour without the protocol)",
    )
    p.add_argument(
        "--enqueue-order",
        choices=ENQUEUE_ORDERS,
        default="priority",
        help="the order a namespace's waiting PodGroups are enqueued in: priority (higher first, "
        "then older: what kube-batch's and Volcano's enqueue actions implement) or fcfs (older "
        "first, as the Delay Pod Creation design words it); another namespace's waiting group "
        "never holds a group back",
    )
    p.add_argument(
        "--evict-overused",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="evict the members of a Running PodGroup beyond its minMember and minResources (newest "
        "first, through the Eviction API: PDBs and the opt-out label are honoured) when a waiting "
        "PodGroup of its namespace, of equal or higher priority, lacks only the capacity they hold "
        "(default off)",
    )
    p.add_argument(
        "--gate-orphan-seconds",
        type=_positive_seconds,
        default=DEFAULT_ORPHAN_SECONDS,
        help="seconds a member pod waits for a PodGroup that does not exist before its scheduling "
        "gate is lifted, with an Event (a typo must not hold a pod forever)",
    )
    p.add_argument("--log-level", default="INFO")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value
