"""`python -m controller run`: the controller program.

Watch caches feed a work queue (keys "podgroup:NS/NAME", "ledger:NS", "namespace:NS",
"priority-table"); one worker, while this process leads, reconciles PodGroup status, applies
gang preemption, reclaims stale ledger entries, puts back a reserving namespace's
enrolment label (controller/enrol.py), keeps a namespace's default-class label in step with its
annotation (controller/namespace_default.py) and keeps the PriorityClass table kube-apiserver
resolves pods from (controller/priority_table.py). One worker on purpose: enqueue decisions are
first come, first served, and a group's reservation must be visible to the next group's decision.

With --pod-preemption, every replica also serves kube-scheduler's preempt extender over HTTPS
(controller/extender.py, --extender-bind): single-pod preemption stays kube-scheduler's, shaped by
priogate's policies; the leader alone writes what follows an answer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import signal
import threading
import time
from types import FrameType

import structlog

from controller.caches import build_caches
from controller.election import LeaderElector, default_identity
from controller.engine_state import EngineState
from controller.enrol import Enroller
from controller.events import EventRecorder
from controller.extender import PreemptExtender
from controller.extender_server import check_tls
from controller.extender_server import serve as serve_extender
from controller.gang_preemptor import GangPreemptor
from controller.gates import GateLifter
from controller.namespace_default import DefaultClassLabeller
from controller.overuse import OverusedEvictor
from controller.priority_table import ClassAccessWriter, PriorityTableWriter
from controller.reclaim import Reclaimer
from controller.reconcile import Reconciler
from controller.serving import Metrics, serve
from controller.workqueue import WorkQueue
from priogate import namespace_default
from priogate.kube.cache import CacheState, Obj
from priogate.kube.client import ApiClient, load_client
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger.codec import covered_namespace, ledger_name, stored_size
from priogate.logs import configure_logging
from priogate.podgroup import FINISHED_PHASES, group_of
from priogate.preemption import policy as preemption_policy

log = structlog.get_logger("priogate.controller")

GROUP_KEY = "podgroup:"
LEDGER_KEY = "ledger:"
TABLE_KEY = "priority-table"
DEFAULT_LABEL_KEY = "namespace:"  # the default-class label (controller/namespace_default.py)


class Controller:
    def __init__(self, args: argparse.Namespace, client: ApiClient) -> None:
        self.args = args
        self.client = client
        self.identity = args.leader_elect_identity or default_identity()
        self.metrics = Metrics()
        self.queue = WorkQueue()
        self.stop = threading.Event()
        self.leading = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        self.caches = build_caches(client, self.on_event, args.ledger_namespace, args.cache_quiet_seconds)
        for cache in self.caches.all():
            cache.on_state = self._export_cache_state
            self._export_cache_state(cache.state())
        self.elector: LeaderElector | None = None
        if args.leader_elect:
            self.elector = LeaderElector(
                client,
                args.leader_elect_namespace,
                args.leader_elect_name,
                self.identity,
                lease_duration=args.lease_duration,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
                on_started=self.started_leading,
                on_stopped=self.stopped_leading,
            )
        # Sent from a thread of their own: an Event never delays a preemption's writes.
        self.events = events = EventRecorder(client, self.identity, asynchronous=True)
        policy = preemption_policy.from_arguments(args)
        # One engine state for both preemptors: one set of watch callbacks, one lock.
        engine = EngineState.attach(self.caches) if args.gang_preemption or args.pod_preemption else None
        preemptor = None
        if args.gang_preemption:
            preemptor = GangPreemptor(
                client,
                self.caches,
                events,
                self.is_leader,
                policy=policy,
                retry_after=args.preemption_retry_seconds,
                max_age=args.preemption_record_max_age,
                on_applied=self._count_preemption,
                engine=engine,
            )
        self.extender: PreemptExtender | None = None
        if args.pod_preemption:
            check_tls(args.cert_file, args.key_file)
            assert engine is not None
            self.extender = PreemptExtender(
                client, self.caches, engine, events, self.is_leader, policy, on_answer=self._count_answer
            )
        self.reconciler = Reconciler(
            client,
            self.caches,
            preemptor,
            self.is_leader,
            events,
            inqueue_timeout=args.inqueue_timeout,
            enqueue_backoff=args.enqueue_backoff,
            enqueue_gate=args.enqueue,
            enqueue_order=args.enqueue_order,
            gates=GateLifter(client, events, args.gate_orphan_seconds),
            requeue=lambda key, delay: self.queue.add_after(f"{GROUP_KEY}{key}", delay),
            evictor=OverusedEvictor(
                client, self.caches, events, self.is_leader, opt_out_mode=policy.opt_out_mode
            )
            if args.evict_overused
            else None,
        )
        in_flight = dt.timedelta(seconds=args.in_flight_seconds)
        self.reclaimer = Reclaimer(
            LedgerStore(
                client, ledger_namespace=args.ledger_namespace, in_flight=in_flight, writer="controller"
            ),
            self.caches,
            in_flight,
        )
        self.enroller = Enroller(client, self.caches, args.ledger_namespace)
        self.default_labeller = DefaultClassLabeller(client, self.caches)
        # In priogate's own namespace, with the ledgers: tenants cannot write there.
        self.priority_table = PriorityTableWriter(client, args.ledger_namespace, self.caches.classes.items)
        self.class_access = ClassAccessWriter(client, args.ledger_namespace, self.caches.classes.items)

    def is_leader(self) -> bool:
        return self.elector.is_leader() if self.elector is not None else not self.stop.is_set()

    def _export_cache_state(self, state: CacheState) -> None:
        self.metrics.cache_stale.labels(state.name).set(0 if state.synced else 1)
        self.metrics.cache_last_event.labels(state.name).set(state.last_event)

    def _count_answer(self, result: str, seconds: float) -> None:
        self.metrics.extender_answers.labels(result=result).inc()
        self.metrics.extender_seconds.observe(seconds)

    def _count_preemption(self, victims: int) -> None:
        self.metrics.preemptions.inc()
        self.metrics.victims.inc(victims)

    # ---- events into keys ----------------------------------------------------------------------

    def on_event(self, cache: str, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        if cache == "podgroups":
            self.queue.add(f"{GROUP_KEY}{namespace}/{meta.get('name')}")
            # A group gone, stored, or with a new spec: its ledger may need to follow (the
            # sweep looks at the caches first and calls the API only when they disagree).
            self.queue.add(f"{LEDGER_KEY}{namespace}")
        elif cache == "pods":
            group = group_of(obj)
            if group:
                self.queue.add(f"{GROUP_KEY}{namespace}/{group}")
        elif cache == "quotas":
            for group in self.caches.podgroups.namespace(namespace).values():
                self.queue.add(f"{GROUP_KEY}{namespace}/{group['metadata']['name']}")
        elif cache == "ledgers":
            # Ledgers live in priogate's namespace; each names the namespace it covers. A
            # deleted ledger is rebuilt.
            covered = covered_namespace(obj)
            if covered:
                self.queue.add(f"{LEDGER_KEY}{covered}")
                self.ledger_size(covered, None if event_type == "DELETED" else obj)
        elif cache == "classes":
            self.queue.add(TABLE_KEY)
        elif cache == "namespaces":
            # Its enrolment label may be gone (controller/enrol.py): the ledger's key checks it.
            name = meta.get("name", "")
            if name and self.caches.ledgers.get(self.args.ledger_namespace, ledger_name(name)) is not None:
                self.queue.add(f"{LEDGER_KEY}{name}")
            if name and event_type != "DELETED" and namespace_default.label_out_of_step(obj):
                self.queue.add(f"{DEFAULT_LABEL_KEY}{name}")
        self.metrics.queue_depth.set(self.queue.depth())

    def ledger_size(self, namespace: str, ledger: Obj | None) -> None:
        gauge = self.metrics.ledger_bytes
        if ledger is not None:
            gauge.labels(namespace).set(stored_size(ledger))
        else:
            gauge.remove(namespace)  # a no-op for a namespace never set

    def resync(self) -> None:
        self.queue.add(TABLE_KEY)  # also rewrites a table edited or deleted by hand
        for name in self.default_labeller.out_of_step():
            self.queue.add(f"{DEFAULT_LABEL_KEY}{name}")
        for group in self.caches.podgroups.items():
            if ((group.get("status") or {}).get("phase") or "") not in FINISHED_PHASES:
                meta = group["metadata"]
                self.queue.add(f"{GROUP_KEY}{meta['namespace']}/{meta['name']}")

    def sweep_ledgers(self) -> None:
        for namespace in self.reclaimer.namespaces():
            self.queue.add(f"{LEDGER_KEY}{namespace}")

    # ---- leadership ----------------------------------------------------------------------------

    def started_leading(self) -> None:
        self.metrics.leader.set(1)
        self.leading.set()
        self.resync()
        self.sweep_ledgers()

    def stopped_leading(self) -> None:
        self.metrics.leader.set(0)
        self.leading.clear()
        # The reconcile in flight checks leadership before each write; let it end.
        self.idle.wait(10)

    # ---- the worker ----------------------------------------------------------------------------

    def worker(self) -> None:
        while not self.stop.is_set():
            if not self.leading.wait(0.5):
                continue
            if not self.caches.synced():
                # A stale cache may be behind: status writes and gang preemption wait for current
                # ones rather than act on old data (the sweep reads a quorum LIST, but waits too,
                # so one rule covers the worker). Keys wait in the queue meanwhile.
                self.stop.wait(0.5)
                continue
            key = self.queue.get(timeout=0.5)
            self.metrics.queue_depth.set(self.queue.depth())
            if key is None:
                continue
            self.idle.clear()
            try:
                if not self.is_leader():
                    self.queue.add_after(key, 1.0)  # a later leader (maybe this one) does it
                    continue
                self.process(key)
                self.queue.forget(key)
            except Exception as e:
                kind = key.split(":", 1)[0]
                self.metrics.reconciles.labels(kind=kind, result="error").inc()
                delay = self.queue.retry(key)
                log.warning("reconcile failed; retrying", key=key, error=str(e), retry_in=round(delay, 2))
            finally:
                self.queue.done(key)
                self.idle.set()

    def process(self, key: str) -> None:
        if key == TABLE_KEY:
            self.metrics.reconciles.labels(kind="priority-table", result=self.priority_table.sync()).inc()
            self.metrics.reconciles.labels(kind="class-access", result=self.class_access.sync()).inc()
        elif key.startswith(DEFAULT_LABEL_KEY):
            if self.default_labeller.sync(key.removeprefix(DEFAULT_LABEL_KEY)):
                self.metrics.reconciles.labels(kind="namespace", result="default-class-labelled").inc()
        elif key.startswith(GROUP_KEY):
            namespace, _, name = key.removeprefix(GROUP_KEY).partition("/")
            result = self.reconciler.reconcile(namespace, name)
            self.metrics.reconciles.labels(kind="podgroup", result=result).inc()
        elif key.startswith(LEDGER_KEY):
            namespace = key.removeprefix(LEDGER_KEY)
            result = self.reclaimer.reclaim(namespace)
            if self.enroller.enrol(namespace):
                self.metrics.reconciles.labels(kind="namespace", result="enrolled").inc()
            if result.recheck_after is not None:  # an entry in flight: look again once it is not
                self.queue.add_after(key, result.recheck_after)
            self.metrics.reconciles.labels(
                kind="ledger", result="reclaimed" if result.changed else "unchanged"
            ).inc()

    def ticker(self) -> None:
        next_resync = next_sweep = time.monotonic()
        while not self.stop.wait(1.0):
            now = time.monotonic()
            if not self.leading.is_set():
                continue
            if now >= next_resync:
                self.resync()
                next_resync = now + self.args.resync_seconds
            if now >= next_sweep:
                self.sweep_ledgers()
                next_sweep = now + self.args.reclaim_seconds

    def run(self) -> int:
        server = serve(self.args.bind, self.metrics, self.caches.listed, self.caches.not_current)
        log.info("controller starting", identity=self.identity, bind=self.args.bind)
        self.caches.start()
        while not self.caches.wait_synced(1.0):
            if self.stop.is_set():
                return 0
        log.info("caches synced")
        # The caches' objects (and the kubernetes client's) live as long as the process: take
        # them out of the collector's view, so its full passes stay short and do not land inside
        # a preemption decision.
        gc.freeze()
        extender = None
        if self.extender is not None:
            # Only once the caches are synced: an answer from a partial view could drop nodes (or
            # miss an opted-out victim). Until then kube-scheduler's calls fail and, the extender
            # not being ignorable, the pod does not preempt yet.
            extender = serve_extender(
                self.args.extender_bind, self.args.cert_file, self.args.key_file, self.extender
            )
            log.info("preempt extender serving", bind=self.args.extender_bind)
        threads = [
            threading.Thread(target=self.worker, name="worker", daemon=True),
            threading.Thread(target=self.ticker, name="ticker", daemon=True),
        ]
        for t in threads:
            t.start()
        if self.elector is not None:
            self.elector.run(self.stop)  # returns after stop is set and the lease is released
        else:
            self.started_leading()
            self.stop.wait()
            self.stopped_leading()
        self.queue.shut_down()
        for t in threads:
            t.join(5)
        self.caches.stop()
        self.events.close()
        server.shutdown()
        if extender is not None:
            extender.shutdown()
        log.info("controller stopped", identity=self.identity)
        return 0


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        controller = Controller(args, load_client(args.kubeconfig))
    except ValueError as e:
        log.error("controller not started", error=str(e))
        return 2

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal received, stopping", signal=signal.Signals(signum).name)
        controller.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return controller.run()
