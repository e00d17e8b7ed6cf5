"""The ledger's authoritative copy: one ConfigMap per tenant namespace in priogate's
own namespace, written with a resourceVersion precondition. Every webhook replica and worker
serializes its reservation decisions (PodGroups, and pods in namespaces with live reservations)
through that object, as kube-apiserver's ResourceQuota admission serializes through a quota's
status (plugin/pkg/admission/resourcequota controller.go): a decision made on a stale copy fails
with 409 and is made again on a GET. A turn starts from the watch's copy where the turn stamps
say it is current (priogate/ledger/turn_order.py), else from a GET; a decision that writes nothing is
made on a GET in any case, since no precondition then proves its copy current.

Within one process, concurrent requests for a namespace are batched (again as kube-apiserver's
quota admission does): whoever holds the namespace's turn decides every waiting request in
order against one read, and writes once. Optimistic concurrency then only settles races between
processes, and 32 requests in flight cost a few writes instead of a livelock of retries.

A turn may need the truth behind the ledger: the namespace's stored PodGroups and its
ResourceQuotas. Those are quorum reads (a GET or LIST without a resourceVersion is served from
etcd, or from the watch cache only once it is proven as fresh: KEP-2340, consistent reads from
cache), made at most once per turn and shared by its batch, never a watch cache's view. A
ledger that is missing or damaged is rebuilt from the PodGroup LIST before anything is decided,
with the listed quotas as its quota fences (priogate.ledger.fences): the fences it held, if any,
are lost with it. A PodGroup decision counts no quota's status.used, and reads no quota in its
turn: the cached quotas and the ledger's fences stand for the quotas as they are. A decision
that counts status.used (a pod's) reads the quotas after the ledger, in the turn, so a charge
another replica dropped because the quota's status.used now holds it is counted in one of the
two.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from priogate import podgroup
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.kube.watched_ledger import WatchedLedgers
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, ledger_object, ledger_of, ledger_path
from priogate.ledger.fences import seeded
from priogate.ledger.model import DamagedLedger, Decide, Ledger, Listing, stamp
from priogate.ledger.settlement import resync
from priogate.ledger.stored_groups import listing_of
from priogate.ledger.timing import (
    ANSWER_MARGIN_SECONDS,
    CALL_TIMEOUT,
    IN_FLIGHT,
    LATE_WRITE_SECONDS,
    TURN_DEADLINE_SECONDS,
    TURN_POLL_SECONDS,
)
from priogate.ledger.turn_order import TURN_ANNOTATION, UNSTAMPED, Turn, turn_of

log = structlog.get_logger("priogate.ledger")

R = TypeVar("R")


class LedgerBusy(Exception):
    """Conflicts did not settle within the deadline; the caller should deny with 'retry'."""


class QuorumReads:
    """The quorum reads of one turn in one namespace, each made at most once."""

    def __init__(self, client: ApiClient, namespace: str, clock: Callable[[], dt.datetime]) -> None:
        self.client = client
        self.namespace = namespace
        self.clock = clock
        self._quotas: list[Mapping[str, Any]] | None = None
        self._quota: dict[str, Mapping[str, Any] | None] = {}
        self._listing: Listing | None = None
        self.calls = 0

    def quotas(self) -> list[Mapping[str, Any]]:
        if self._quotas is None:
            self.calls += 1
            path = resource_path("v1", "resourcequotas", self.namespace)
            self._quotas = list(self.client.list_all(path, timeout=CALL_TIMEOUT))
        return self._quotas

    def forget_quotas(self) -> None:
        self._quotas = None
        self._quota.clear()

    def quota(self, name: str) -> Mapping[str, Any] | None:
        """One quota by a quorum GET (None when there is none), at most once per name."""
        if name not in self._quota:
            self.calls += 1
            try:
                got = self.client.get(
                    resource_path("v1", "resourcequotas", self.namespace, name), timeout=CALL_TIMEOUT
                )
            except ApiError as e:
                if e.status != 404:
                    raise
                got = None
            self._quota[name] = got
        return self._quota[name]

    def podgroups(self) -> Listing:
        if self._listing is None:
            # Taken before the LIST: every group stored before this moment is in its answer.
            started = self.clock()
            self.calls += 1
            path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, self.namespace)
            items = self.client.list_all(path, timeout=CALL_TIMEOUT)
            self._listing = listing_of(items, started)
            if self._listing.unreadable:
                log.warning(
                    "stored PodGroups with unreadable specs reserve nothing",
                    namespace=self.namespace,
                    groups=list(self._listing.unreadable),
                )
        return self._listing


@dataclass
class _Request(Generic[R]):
    decide: Decide
    dry_run: bool
    deadline: float  # time.monotonic() by which its caller must have an answer
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


@dataclass(frozen=True)
class _Copy:
    """A copy of a ledger a turn decides on: `version` None when there is no ledger, `fresh`
    when read by a GET in this turn (else the watch's copy), `rebuilt` when made from the
    stored PodGroups because the stored ledger was missing or damaged."""

    ledger: Ledger
    version: str | None
    turn: Turn
    fresh: bool = True
    rebuilt: bool = False


@dataclass
class _Namespace:
    turn: threading.Lock = field(default_factory=threading.Lock)
    waiting: list[_Request] = field(default_factory=list)
    waiting_lock: threading.Lock = field(default_factory=threading.Lock)


class LedgerStore:
    def __init__(
        self,
        client: ApiClient,
        *,
        ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE,
        in_flight: dt.timedelta = IN_FLIGHT,
        deadline_seconds: float = TURN_DEADLINE_SECONDS,
        late_write_seconds: float = LATE_WRITE_SECONDS,
        on_conflict: Callable[[], None] = lambda: None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        watched: WatchedLedgers | None = None,
        writer: str = "priogate",
    ) -> None:
        """`watched`: turns start from the watch's copy of a ledger where it is current
        (priogate/ledger/turn_order.py), else from a GET. `writer` names this process's writes in
        their turn stamps (the watched ledgers' writer when there are any)."""
        self.client = client
        self.ledger_namespace = ledger_namespace
        self.in_flight = in_flight
        self.deadline_seconds = deadline_seconds
        self.late_write_seconds = late_write_seconds
        self.on_conflict = on_conflict
        self.clock = clock
        self.watched = watched
        self.writer = watched.writer if watched is not None else writer
        self._namespaces: dict[str, _Namespace] = {}
        self._lock = threading.Lock()

    def _namespace(self, namespace: str) -> _Namespace:
        with self._lock:
            return self._namespaces.setdefault(namespace, _Namespace())

    def update(
        self,
        namespace: str,
        decide: Decide,
        *,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> Any:
        """`deadline` (time.monotonic()) is when the caller stops waiting; the answer comes
        ANSWER_MARGIN_SECONDS before it, and never later than deadline_seconds from now."""
        state = self._namespace(namespace)
        own = time.monotonic() + self.deadline_seconds
        if deadline is not None:
            own = min(own, deadline - ANSWER_MARGIN_SECONDS)
        request: _Request = _Request(decide, dry_run, own)
        with state.waiting_lock:
            state.waiting.append(request)
        while not request.done.is_set():
            remaining = request.deadline - time.monotonic()
            if remaining <= 0:
                with state.waiting_lock:
                    if any(r is request for r in state.waiting):  # not in a batch: withdraw it
                        state.waiting.remove(request)
                        raise LedgerBusy(f"ledger of namespace {namespace} is busy in this process")
                request.done.wait(TURN_POLL_SECONDS)  # a batch holds it: its holder answers it
                continue
            # Bounded waits: a batch may be handed back to the waiting list at any time.
            if not state.turn.acquire(timeout=min(remaining, TURN_POLL_SECONDS)):
                continue
            try:
                if request.done.is_set():  # decided in the batch of the previous turn holder
                    break
                self._take_turn(state, namespace, request)
            finally:
                state.turn.release()
        if request.error is not None:
            raise request.error
        return request.result

    def _take_turn(self, state: _Namespace, namespace: str, holder: _Request) -> None:
        """The process's turn, held: decide everything waiting by then as one batch."""
        with state.waiting_lock:
            batch, state.waiting = state.waiting, []
        self._decide_batch(state, namespace, batch, holder)

    def _decide_batch(
        self, state: _Namespace, namespace: str, batch: list[_Request], holder: _Request
    ) -> None:
        try:
            self._write_batch(state, namespace, batch, holder)  # removes the requests it answers early
        except Exception as e:
            for request in batch:
                request.error = e
                request.done.set()
            return
        if holder.done.is_set() and batch:
            # The holder's own deadline ran out while conflicts went on: it answers its caller
            # now, and the rest go back to wait for a turn of their own, never held past their
            # deadline by this thread.
            with state.waiting_lock:
                state.waiting[:0] = batch
            return
        for request in batch:
            request.done.set()

    def read(self, namespace: str, reads: QuorumReads) -> _Copy:
        """The ledger by a GET. A missing or damaged ledger is rebuilt from the stored
        PodGroups: a missing ledger never means that nothing is reserved."""
        try:
            current: dict[str, Any] | None = self.client.get(
                ledger_path(self.ledger_namespace, namespace), timeout=CALL_TIMEOUT
            )
        except ApiError as e:
            if e.status != 404:
                raise
            current = None
        if current is not None:
            version = (current.get("metadata") or {}).get("resourceVersion")
            try:
                return _Copy(ledger_of(current), version, turn_of(current))
            except DamagedLedger as e:
                log.warning("ledger damaged; rebuilding it", namespace=namespace, error=str(e))
                return _Copy(self._rebuilt(reads), version, UNSTAMPED, rebuilt=True)
        listing = reads.podgroups()
        if listing.groups:
            log.warning(
                "ledger missing; rebuilt from the stored PodGroups",
                namespace=namespace,
                groups=sorted(e.group for e in listing.groups.values()),
            )
        return _Copy(self._rebuilt(reads), None, UNSTAMPED, rebuilt=True)

    def _watched_copy(self, namespace: str, deadline: float) -> _Copy | None:
        if self.watched is None:
            return None
        started = self.watched.start_copy(namespace, deadline)
        if started is None:
            return None
        obj, turn = started
        try:
            ledger = ledger_of(obj)
        except DamagedLedger:
            return None  # the GET finds it damaged too, and rebuilds it
        return _Copy(ledger, (obj.get("metadata") or {}).get("resourceVersion"), turn, fresh=False)

    def _rebuilt(self, reads: QuorumReads) -> Ledger:
        """The ledger the stored PodGroups and quotas make; the quotas as fences, since this
        turn's decisions must count a quota change the cache may not show yet."""
        entries = resync({}, reads.podgroups(), self.in_flight)
        return Ledger(entries, fences=seeded(reads.quotas(), stamp(self.clock())))

    def _write_batch(
        self, state: _Namespace, namespace: str, batch: list[_Request], holder: _Request
    ) -> None:
        """Decide and write until the write lands (every request in `batch` then has its result)
        or the holder's deadline has passed. A request whose deadline passes while conflicts go
        on is answered 'busy' and leaves `batch`. After a conflict the batch takes in what has
        arrived meanwhile: one more write then serves them too."""
        item = ledger_path(self.ledger_namespace, namespace)
        reads = QuorumReads(self.client, namespace, self.clock)
        attempt = 0
        copy = self._watched_copy(namespace, holder.deadline)
        while True:
            attempt += 1
            if attempt > 1:
                with state.waiting_lock:
                    batch.extend(state.waiting)
                    state.waiting.clear()
            current = copy or self.read(namespace, reads)
            copy = None  # a conflict, or a decision to confirm, reads the ledger again
            ledger = current.ledger
            changed = current.rebuilt and not all(r.dry_run for r in batch)
            decided = time.monotonic()
            for request in batch:
                new_ledger, request.result = request.decide(ledger, reads)
                if new_ledger is not None and not request.dry_run:
                    ledger, changed = new_ledger, True
            if not changed:
                if not current.fresh:
                    # No write, so no precondition proves the watch's copy current: decide
                    # again on a GET (the same decisions, unless the ledger has moved on).
                    continue
                return
            turn = current.turn.next(self.writer)
            body = ledger_object(
                self.ledger_namespace,
                namespace,
                ledger,
                current.version,
                annotations={TURN_ANNOTATION: turn.annotation()},
            )
            try:
                if current.version is None:
                    stored = self.client.request(
                        "POST", ledger_path(self.ledger_namespace), body=body, timeout=CALL_TIMEOUT
                    )
                else:
                    stored = self.client.request("PUT", item, body=body, timeout=CALL_TIMEOUT)
                if self.watched is not None:
                    self.watched.written(namespace, stored, turn)
                took = time.monotonic() - decided
                if took > self.late_write_seconds:
                    # Stamped before the write: what is left of its claims' in-flight bound may
                    # no longer cover their way to storage (priogate.ledger.timing).
                    for request in [r for r in batch if r.result is None]:  # the admitted
                        request.error = LedgerBusy(
                            f"the ledger write of namespace {namespace} took {took:.1f} s"
                        )
                return
            except ApiError as e:
                if e.status != 409:
                    raise
                self.on_conflict()
                # The next attempt reads the ledger again; the quotas with it, so a charge
                # another replica dropped (its pod now in status.used) is never missed.
                reads.forget_quotas()
            now = time.monotonic()
            for request in [r for r in batch if r.deadline < now]:
                request.error = LedgerBusy(
                    f"ledger of namespace {namespace} kept changing ({attempt} attempts)"
                )
                request.done.set()
                batch.remove(request)
            if holder.done.is_set():
                return
            # Jittered, growing pause so contending processes spread out instead of colliding again.
            time.sleep(random.uniform(0, min(0.002 * 2 ** min(attempt, 6), 0.1)))
