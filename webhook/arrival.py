"""When the request a thread is serving had fully arrived at the server.

A request waits in the worker's queue for a free thread (webhook/worker.py) after its head has
come in. kube-apiserver's timeout for the call (the `timeout` query parameter) runs from before
that, so an admission's deadline must count from the arrival too, not from when a thread took
the request: else, with every thread busy in a long wait (a pod waiting for claims in flight),
the queued requests get answered after kube-apiserver has given up on them, and the caller sees
"context deadline exceeded" instead of the refusal or admission.
"""

from __future__ import annotations

import threading
import time

_local = threading.local()


def mark_arrival(at: float | None) -> None:
    """Record (on this thread) the time.monotonic() at which the request it is about to serve
    arrived; None: not known (the thread read the request itself, so it did not wait)."""
    _local.at = at


def arrived_at() -> float:
    """When the request this thread serves arrived (time.monotonic()): the mark, or now."""
    at = getattr(_local, "at", None)
    now = time.monotonic()
    return now if at is None or at > now else at
