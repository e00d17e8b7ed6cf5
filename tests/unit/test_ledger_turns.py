"""The pure turns of priogate.ledger on hand-made ledgers: the clock and the quorum reads are the
test's, so the moments that matter (a claim's bound passing between the caches' read and the
LIST) are set exactly."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from priogate.ledger import claim, fences
from priogate.ledger.claim import Claim
from priogate.ledger.fences import fence_of
from priogate.ledger.model import Entry, Ledger, Listing, stamp
from priogate.ledger.outcome import Awaiting
from priogate.ledger.timing import IN_FLIGHT
from priogate.ledger.totals import EntryTotals

T0 = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
QUOTA = {
    "metadata": {"name": "compute", "namespace": "ns", "uid": "q", "resourceVersion": "1"},
    "spec": {"hard": {"cpu": "10"}},
}


def entry(name: str, cpu: str, at: dt.datetime, generation: int = 1) -> Entry:
    return Entry(name, f"uid-{name}", {"cpu": cpu}, 1, "", stamp(at), generation)


class Reads:
    """One quorum LIST of the stored groups, begun at `listed_at`; counts the LISTs made."""

    def __init__(self, stored: Mapping[str, Entry], listed_at: dt.datetime) -> None:
        self.stored, self.listed_at, self.lists = stored, listed_at, 0

    def quotas(self) -> list[Mapping[str, Any]]:
        return [QUOTA]

    def quota(self, name: str) -> Mapping[str, Any] | None:
        return QUOTA if name == "compute" else None

    def podgroups(self) -> Listing:
        self.lists += 1
        return Listing(dict(self.stored), self.listed_at)


REAL = entry("real", "6", T0 - dt.timedelta(minutes=1))
GHOST = entry("ghost", "4", T0, generation=0)  # admitted, never stored (forged, or refused later)


def turn(asked: float, listed: float) -> tuple[Ledger | None, Any, Reads]:
    """The 4-cpu group `fits` asks `asked` s after the ghost was admitted; the LIST begins at
    `listed` s."""
    asked_at = T0 + dt.timedelta(seconds=asked)
    stored = {REAL.uid: REAL}
    reads = Reads(stored, T0 + dt.timedelta(seconds=listed))
    ask = Claim(
        "ns",
        entry("fits", "4", asked_at),
        None,
        {REAL.uid: False},
        stored,
        [QUOTA],
        IN_FLIGHT,
        EntryTotals(),
        asked_at,
    )
    ledger = Ledger({REAL.uid: REAL, GHOST.uid: GHOST})
    new, outcome = claim.decide(ledger, reads, lambda: asked_at, ask)
    return new, outcome, reads


@pytest.mark.parametrize(
    ("asked", "listed", "admitted", "awaits", "lists"),
    [
        (0.5, 0.5, False, True, 0),  # unseen a moment: awaited through the cache, no LIST
        (2.0, 2.0, False, True, 1),  # unseen a while: a LIST shows it may still be stored
        (6.0, 6.0, True, False, 1),  # past its bound: a LIST ends it
        # The bound passes between the caches' read and the LIST: the LIST ends it. Old code:
        # refused, as the claim was judged in flight by the caches' time and settled by the LIST's.
        (4.9, 6.0, True, False, 1),
    ],
)
def test_a_never_stored_claim_delays_a_group_until_its_bound_and_blocks_nothing_after(
    asked, listed, admitted, awaits, lists
):
    new, outcome, reads = turn(asked, listed)
    assert (outcome is None) == admitted
    assert isinstance(outcome, Awaiting) == awaits
    assert reads.lists == lists
    if admitted:
        assert set(new.entries) == {REAL.uid, "uid-fits"}


def test_a_stored_claim_refuses_and_the_ledger_is_not_written():
    stored = {REAL.uid: REAL, GHOST.uid: GHOST}
    reads = Reads(stored, T0 + dt.timedelta(seconds=6))
    asked_at = T0 + dt.timedelta(seconds=6)
    ask = Claim(
        "ns",
        entry("fits", "4", asked_at),
        None,
        {u: False for u in stored},
        stored,
        [QUOTA],
        IN_FLIGHT,
        EntryTotals(),
        asked_at,
    )
    new, outcome = claim.decide(Ledger(dict(stored)), reads, lambda: asked_at, ask)
    assert new is None and isinstance(outcome, str) and "reserved: cpu=10" in outcome


def test_a_fence_turn_keeps_live_fences_adds_its_own_and_never_refuses():
    old = fence_of(QUOTA, None, stamp(T0))
    lowered = {**QUOTA, "metadata": {**QUOTA["metadata"], "name": "other"}, "spec": {"hard": {"cpu": "2"}}}
    new = fence_of(lowered, None, stamp(T0 + dt.timedelta(seconds=1)))
    ledger, outcome = fences.decide(
        Ledger(fences={old.key: old}), None, lambda: T0 + dt.timedelta(seconds=2), new
    )
    assert outcome is None and set(ledger.fences) == {old.key, new.key}
    later, _ = fences.decide(ledger, None, lambda: T0 + dt.timedelta(hours=1), new)
    assert set(later.fences) == {new.key}  # expired fences go with the next write
