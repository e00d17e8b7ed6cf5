"""Whether this thread is answering an admission on the worker's event loop (webhook/asgi.py).

An admission answered there holds up every other connection of the worker until it returns, so
it must not wait: not for the API server (a PriorityClass the cache lacks is read once more,
webhook/class_lookup.py), nor for a cache to come back. Every such wait calls forbid_waiting()
first; on the loop it raises WouldBlock, and the app answers the admission again on a thread,
from the start. Nothing before a wait writes anything, so answering again is safe.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_state = threading.local()


class WouldBlock(Exception):
    """Raised on the event loop where an admission would wait (its argument: for what)."""


@contextlib.contextmanager
def answering_on_loop() -> Iterator[None]:
    _state.on_loop = True
    try:
        yield
    finally:
        _state.on_loop = False


def forbid_waiting(what: str) -> None:
    if getattr(_state, "on_loop", False):
        raise WouldBlock(what)
