"""The ledger's authoritative copy: one ConfigMap per namespace, read fresh and
written with a resourceVersion precondition. Every webhook replica and worker serializes its
reservation decisions through that object, as the built-in ResourceQuota admission does through
a quota's status: a decision made on a stale read fails with 409 and is made again.

Within one process, concurrent requests for a namespace are batched (again as kube-apiserver's
quota admission does): whoever holds the namespace's turn decides every waiting request in
order against one read, and writes once. Optimistic concurrency then only settles races between
processes, and 32 requests in flight cost a few writes instead of a livelock of retries.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from priogate.kube.client import ApiClient, ApiError
from priogate.ledger import Entry, entries_of, ledger_object, ledger_path

log = structlog.get_logger("priogate.ledger")

R = TypeVar("R")
# decide(entries) -> (new entries to write, or None to write nothing; the result to return)
Decide = Callable[[dict[str, Entry]], tuple[dict[str, Entry] | None, R]]


# (connect, read) seconds for one ledger call: well inside kube-apiserver's webhook timeout, so a
# hung call becomes a retry or a 'busy' answer, not a webhook timeout.
CALL_TIMEOUT = (3, 5)
TURN_POLL_SECONDS = 0.05
# Time kept back from the caller's deadline for the answer to travel (and a last write to end).
ANSWER_MARGIN_SECONDS = 1.5


class LedgerBusy(Exception):
    """Conflicts did not settle within the deadline; the caller should deny with 'retry'."""


@dataclass
class _Request(Generic[R]):
    decide: Decide[R]
    dry_run: bool
    deadline: float  # time.monotonic() by which its caller must have an answer
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


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
        deadline_seconds: float = 7.0,
        on_conflict: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.deadline_seconds = deadline_seconds
        self.on_conflict = on_conflict
        self._namespaces: dict[str, _Namespace] = {}
        self._lock = threading.Lock()

    def _namespace(self, namespace: str) -> _Namespace:
        with self._lock:
            return self._namespaces.setdefault(namespace, _Namespace())

    def update(
        self, namespace: str, decide: Decide[R], *, dry_run: bool = False, deadline: float | None = None
    ) -> R:
        """`deadline` (time.monotonic()) is when the caller stops waiting; the answer comes
        ANSWER_MARGIN_SECONDS before it, and never later than deadline_seconds from now."""
        state = self._namespace(namespace)
        own = time.monotonic() + self.deadline_seconds
        if deadline is not None:
            own = min(own, deadline - ANSWER_MARGIN_SECONDS)
        request: _Request[R] = _Request(decide, dry_run, own)
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
                with state.waiting_lock:
                    batch, state.waiting = state.waiting, []
                self._decide_batch(state, namespace, batch, request)
            finally:
                state.turn.release()
        if request.error is not None:
            raise request.error
        return request.result

    def _decide_batch(
        self, state: _Namespace, namespace: str, batch: list[_Request], holder: _Request
    ) -> None:
        try:
            self._write_batch(namespace, batch, holder)  # removes the requests it answers early
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

    def _write_batch(self, namespace: str, batch: list[_Request], holder: _Request) -> None:
        """Decide and write until the write lands (every request in `batch` then has its result)
        or the holder's deadline has passed. A request whose deadline passes while conflicts go
        on is answered 'busy' and leaves `batch`."""
        item = ledger_path(namespace)
        attempt = 0
        while True:
            attempt += 1
            try:
                current = self.client.get(item, timeout=CALL_TIMEOUT)
            except ApiError as e:
                if e.status != 404:
                    raise
                current = None
            version = (current or {}).get("metadata", {}).get("resourceVersion")
            entries = entries_of(current)
            changed = False
            for request in batch:
                new_entries, request.result = request.decide(dict(entries))
                if new_entries is not None and not request.dry_run:
                    entries, changed = new_entries, True
            if not changed:
                return
            body = ledger_object(namespace, entries, version)
            try:
                if version is None:
                    self.client.request(
                        "POST", ledger_path(namespace, collection=True), body=body, timeout=CALL_TIMEOUT
                    )
                else:
                    self.client.request("PUT", item, body=body, timeout=CALL_TIMEOUT)
                return
            except ApiError as e:
                if e.status != 409:
                    raise
                self.on_conflict()
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
