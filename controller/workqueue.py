"""A work queue of keys with client-go workqueue's guarantees.

- A key waiting in the queue is there once, however often it is added (events coalesce).
- A key is never processed by two workers at once: added while being processed, it is queued
  again when the worker calls done(), so the latest state is always looked at once more.
- add_after() delays a key (periodic resync); retry() delays it with per-key exponential
  backoff, forget() resets that backoff after a success.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable


class WorkQueue:
    def __init__(
        self,
        *,
        base_delay: float = 0.05,
        max_delay: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._clock = clock
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._failures: dict[str, int] = {}
        self._cond = threading.Condition()
        self._shut_down = False

    def add(self, key: str) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: str) -> None:
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            heapq.heappush(self._delayed, (self._clock() + delay, next(self._seq), key))
            self._cond.notify()

    def retry(self, key: str) -> float:
        """Queue `key` again after its backoff (base * 2^failures, capped); returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self.base_delay * 2**failures, self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> str | None:
        """The next key to process (now owned by the caller until done()), or None on timeout
        or shutdown."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_due()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shut_down:
                    return None
                waits = []
                if deadline is not None:
                    waits.append(deadline - self._clock())
                if self._delayed:
                    waits.append(self._delayed[0][0] - self._clock())
                wait = min(waits) if waits else None
                if deadline is not None and deadline - self._clock() <= 0:
                    return None
                self._cond.wait(None if wait is None else max(wait, 0.0))

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._add_locked(key)

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def depth(self) -> int:
        """Keys waiting to be processed now (not the delayed ones)."""
        with self._cond:
            return len(self._queue)

    def shut_down(self) -> None:
        with self._cond:
            self._shut_down = True
            self._cond.notify_all()
