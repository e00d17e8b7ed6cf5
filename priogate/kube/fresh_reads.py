"""Reads shared by every request that arrived before they started.

A PodGroup admission must be decided against the namespace's ResourceQuotas as they were at
some moment after the request arrived: a quota created or lowered before that limits it. A
quorum LIST gives that, but kube-apiserver serves it from its watch cache once the cache is
proven current (KEP-2340, consistent reads from cache), and a cache that has heard no event
lately waits for etcd's next progress notification, requested every 100 ms
(k8s.io/apiserver/pkg/storage/cacher/progress: progressRequestPeriod). ResourceQuotas rarely
change, so that LIST took 70 to 90 ms, inside the namespace's serialized ledger turn.

Any read that started after a request arrived is fresh enough for it, so the read is started
when a request arrives and one read serves every request that arrived before it started. The
turn decides on the cached quotas; the admission waits for its read only after the turn
(webhook.rules.podgroup_quota), and by then the read has usually ended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Key(Generic[T]):
    changed: threading.Condition = field(default_factory=threading.Condition)
    running_since: float | None = None  # time.monotonic() when the read in flight started
    again: bool = False  # a request arrived after the read in flight started: read once more
    started: float = -1.0  # when the last finished read started
    result: T | None = None
    error: BaseException | None = None


class FreshReads(Generic[T]):
    """`read(key)` made in the background, at most one at a time per key. `get(key, since)`
    answers with the result of a read that started at or after `since` (time.monotonic())."""

    def __init__(self, read: Callable[[Hashable], T], name: str = "fresh-read") -> None:
        self._read = read
        self._name = name
        self._keys: dict[Hashable, _Key[T]] = {}
        self._lock = threading.Lock()

    def _state(self, key: Hashable) -> _Key[T]:
        with self._lock:
            return self._keys.setdefault(key, _Key())

    def want(self, key: Hashable, since: float) -> None:
        """Make sure a read of `key` that starts at or after `since` is on its way."""
        state = self._state(key)
        with state.changed:
            if state.started >= since:
                return
            if state.running_since is not None:
                if state.running_since < since:
                    state.again = True
                return
            state.running_since = time.monotonic()
        threading.Thread(target=self._run, args=(key, state), name=self._name, daemon=True).start()

    def get(self, key: Hashable, since: float, timeout: float) -> T:
        """The result (or the error) of a read started at or after `since`; TimeoutError when
        none finished within `timeout` seconds."""
        self.want(key, since)
        state = self._state(key)
        with state.changed:
            if not state.changed.wait_for(lambda: state.started >= since, timeout):
                raise TimeoutError(f"no read of {key} finished within {timeout:g}s")
            if state.error is not None:
                raise state.error
            return state.result  # type: ignore[return-value]

    def _run(self, key: Hashable, state: _Key[T]) -> None:
        while True:
            with state.changed:
                started = state.running_since
                assert started is not None
            result: T | None = None
            error: BaseException | None = None
            try:
                result = self._read(key)
            except Exception as e:  # handed to every waiter, who decides what it means
                error = e
            with state.changed:
                state.started, state.result, state.error = started, result, error
                state.changed.notify_all()
                if not state.again:
                    state.running_since = None
                    return
                state.again = False
                state.running_since = time.monotonic()
