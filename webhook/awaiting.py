"""Waiting for the fate of admissions still in flight, shared by the quota rule sets.

A turn on the ledger answers Awaiting (priogate.ledger.outcome) when the request fits only if some
claims still in flight turn out never stored. The request then takes another turn later, within
its own deadline: a real claim shows up stored within milliseconds and the next turn refuses; one
never stored passes its in-flight bound, the next turn drops it, and the admission goes through.
The times are priogate.ledger.timing's.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from priogate.ledger.outcome import Awaiting, Outcome
from priogate.ledger.timing import (
    AWAIT_POLL_SECONDS,
    CHANGE_POLL_SECONDS,
    DEFAULT_WAIT_SECONDS,
    WAIT_MARGIN_SECONDS,
)


def decide_waiting(
    turn: Callable[[], Outcome],
    deadline: float | None,
    what: str,
    generation: Callable[[], int] | None = None,
    refusal: Callable[[], str | None] | None = None,
) -> str | None:
    """Take turns until one answers (None: admitted, or a refusal), or the deadline
    (time.monotonic()) comes first: then the refusal says to retry. `what` names the claims
    waited for, e.g. "PodGroup admission(s)". `generation`: the watch cache's generation, which an
    Awaiting `through_cache` waits to change (read before each turn, so no change is missed).
    `refusal`: what the caches alone refuse, asked before each turn after the first: the claims
    awaited usually show up stored, and then the caches refuse the request without a turn."""
    stop = (
        deadline if deadline is not None else time.monotonic() + DEFAULT_WAIT_SECONDS
    ) - WAIT_MARGIN_SECONDS
    waited = False
    while True:
        seen = generation() if generation is not None else None
        if waited and refusal is not None:
            refused = refusal()
            if refused is not None:
                return refused
        waited = True
        result = turn()
        if not isinstance(result, Awaiting):
            return result
        left = max(0.0, (result.until - dt.datetime.now(dt.UTC)).total_seconds())
        by_cache = result.through_cache and generation is not None
        # Timed turns sleep to the next one; turns awaited through a cache look at it often.
        first_look = CHANGE_POLL_SECONDS if by_cache else min(AWAIT_POLL_SECONDS, left)
        if time.monotonic() + first_look > stop:
            return (
                f"{result.problem}; {result.count} other {what} in this namespace may still be on "
                "their way to storage, retry"
            )
        if not by_cache:
            time.sleep(first_look)
            continue
        end = time.monotonic() + min(left, stop - time.monotonic())
        while generation() == seen and time.monotonic() < end:
            time.sleep(CHANGE_POLL_SECONDS)
