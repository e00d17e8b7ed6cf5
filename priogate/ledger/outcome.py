"""What a turn on the ledger answers: None (admitted, and written), a refusal (str), or Awaiting."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from priogate.ledger.model import Ledger, Reads


@dataclass(frozen=True)
class Awaiting:
    """The request fits only if `count` admissions in flight are never stored: their in-flight
    bound passes at `until`. `problem` is the refusal they would cause. It must not be refused for
    them (they may be forged, or refused by a later admission step), nor may they be dropped (they
    may be stored a moment from now): the caller takes another turn later. `through_cache`: the
    claims are awaited through the watch cache, so the next turn is due as soon as the cache
    changes; otherwise after a timed poll."""

    problem: str
    count: int
    until: dt.datetime
    through_cache: bool = False


Outcome = str | Awaiting | None
Clock = Callable[[], dt.datetime]
# A turn as the store runs it: the ledger it read and the turn's quorum reads in, the ledger to
# write (None: write nothing) and the outcome out.
Turn = Callable[[Ledger, Reads], tuple[Ledger | None, Outcome]]
