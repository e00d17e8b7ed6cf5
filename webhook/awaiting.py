"""Waiting for the fate of admissions still in flight, shared by the quota rule sets.

An admission that fits only if some claims still in flight (PodGroups admitted but not stored,
pods admitted but not charged in a quota's status.used) turn out never stored must not be
refused for them: they may be a forged review (an endpoint without mTLS) or a request a later
admission step refused. Nor may it drop them: they may be stored a moment from now, and
dropping them would over-admit (priogate.ledger.DEFAULT_IN_FLIGHT). So it takes another turn on
the namespace's record every POLL_SECONDS, within its own deadline: a real claim shows up
stored within milliseconds and the next turn refuses; one never stored passes its in-flight
bound, the next turn drops it, and the admission goes through.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

POLL_SECONDS = 0.2
CHANGE_POLL_SECONDS = 0.005  # a local check of a cache, no API call
# Kept back from the request's deadline for a last turn and the answer's way back.
WAIT_MARGIN_SECONDS = 2.5
DEFAULT_WAIT_SECONDS = 8.0  # a request without a deadline (tests, offline mode)


@dataclass(frozen=True)
class Awaiting:
    """A turn's answer: the request fits only if `count` admissions in flight are never stored;
    their in-flight bound passes at `until`. `problem` is the refusal they would cause."""

    problem: str
    count: int
    until: dt.datetime
    # Whether what the claims are awaited through (a watch cache) has changed since: then the
    # next turn is taken at once, and until then no turn is taken before `until`. None: turns
    # every POLL_SECONDS.
    changed: Callable[[], bool] | None = None


def decide_waiting(
    turn: Callable[[], str | Awaiting | None], deadline: float | None, what: str
) -> str | None:
    """Take turns until one answers (None: admitted, or a refusal), or the deadline
    (time.monotonic()) comes first: then the refusal says to retry. `what` names the claims
    waited for, e.g. "PodGroup admission(s)"."""
    stop = (
        deadline if deadline is not None else time.monotonic() + DEFAULT_WAIT_SECONDS
    ) - WAIT_MARGIN_SECONDS
    while True:
        result = turn()
        if not isinstance(result, Awaiting):
            return result
        left = max(0.0, (result.until - dt.datetime.now(dt.UTC)).total_seconds())
        # Timed turns sleep to the next one; turns awaited through a cache look at it often.
        first_look = min(POLL_SECONDS, left) if result.changed is None else CHANGE_POLL_SECONDS
        if time.monotonic() + first_look > stop:
            return (
                f"{result.problem}; {result.count} other {what} in this namespace may still be on "
                "their way to storage, retry"
            )
        if result.changed is None:
            time.sleep(first_look)
        else:
            _until_changed(result.changed, min(left, stop - time.monotonic()))


def _until_changed(changed: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not changed() and time.monotonic() < end:
        time.sleep(CHANGE_POLL_SECONDS)
