"""LedgerStore's batching under endless conflicts: every request is answered by its own deadline.

The API here is a stand-in that answers every write with 409, the one behaviour kube-apiserver
cannot be made to show on demand; the batching and deadline logic under test is all real.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from priogate.kube.client import ApiError
from priogate.kube.ledger_store import LedgerBusy, LedgerStore
from priogate.ledger.codec import ledger_object
from priogate.ledger.model import Ledger, Reads
from tests.fake_api import FakeApi


class AlwaysConflicting:
    def __init__(self) -> None:
        self.writes = 0

    def get(self, path: str, **_: Any) -> dict:
        time.sleep(0.005)
        return ledger_object("priogate-system", "team-a", Ledger(), "1")  # an empty ledger

    def request(self, method: str, path: str, **_: Any) -> dict:
        time.sleep(0.005)
        self.writes += 1
        raise ApiError(409, "Conflict", "the object has been modified")


def claim(ledger: Ledger, reads: Reads) -> tuple[Ledger, str]:
    return ledger, "decided"


def test_each_request_is_answered_by_its_own_deadline_not_the_batch_holders():
    api = AlwaysConflicting()
    store = LedgerStore(api, deadline_seconds=0.4)  # type: ignore[arg-type]
    answered: list[tuple[float, float, BaseException | None]] = []  # (started, took, error)
    lock = threading.Lock()

    def admit() -> None:
        started = time.monotonic()
        error: BaseException | None = None
        try:
            store.update("team-a", claim)
        except LedgerBusy as e:
            error = e
        with lock:
            answered.append((started, time.monotonic() - started, error))

    threads = []
    for _ in range(12):  # staggered arrivals, so later holders batch earlier waiters
        threads.append(threading.Thread(target=admit))
        threads[-1].start()
        time.sleep(0.05)
    for t in threads:
        t.join(5)
    assert len(answered) == 12
    assert all(isinstance(error, LedgerBusy) for _, _, error in answered)
    slowest = max(took for _, took, _ in answered)
    # the deadline plus one retry's pause and round trip, never a second holder's whole deadline
    assert slowest < 0.4 + 0.15, f"a request waited {slowest:.2f} s past a 0.4 s deadline"
    assert api.writes > 12


def test_a_batch_that_lands_answers_everyone_in_it():
    class LandsOnce(AlwaysConflicting):
        def request(self, method: str, path: str, **_: Any) -> dict:
            time.sleep(0.02)
            self.writes += 1
            return {}

    api = LandsOnce()
    store = LedgerStore(api, deadline_seconds=2)  # type: ignore[arg-type]
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(store.update("team-a", claim))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert results == ["decided"] * 8
    assert api.writes < 8  # waiting requests shared writes


def test_the_callers_deadline_is_kept_with_a_margin():
    store = LedgerStore(AlwaysConflicting(), deadline_seconds=7)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(LedgerBusy):  # every write conflicts
        store.update("team-a", claim, deadline=started + 1.5 + 0.3)
    took = time.monotonic() - started
    assert 0.25 < took < 0.3 + 0.15, f"answered after {took:.2f} s; the caller allowed 0.3 s plus the margin"


QUOTAS = "/api/v1/namespaces/team-a/resourcequotas"


def _quota_counting(ledger: Ledger, reads: Reads) -> tuple[Ledger, int]:
    return ledger, len(reads.quotas())


def test_decisions_that_count_status_used_read_the_quotas_in_their_turn():
    api = FakeApi()
    store = LedgerStore(api, deadline_seconds=5)
    api.put_object(QUOTAS, {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": "4"}}})
    assert store.update("team-a", _quota_counting) == 1
    ledger_read = next(i for i, c in enumerate(api.calls) if "configmaps" in c.path)
    quota_read = next(i for i, c in enumerate(api.calls) if c.path == QUOTAS)
    assert ledger_read < quota_read  # after the ledger, so a dropped charge is in one of them


def test_after_a_conflict_the_batch_takes_in_what_arrived_meanwhile():
    """One write serves the retried batch and the requests that queued behind it."""

    class ConflictsOnce(AlwaysConflicting):
        def request(self, method: str, path: str, **_: Any) -> dict:
            self.writes += 1
            time.sleep(0.05)
            if self.writes == 1:
                raise ApiError(409, "Conflict", "the object has been modified")
            return {}

    api = ConflictsOnce()
    store = LedgerStore(api, deadline_seconds=5)  # type: ignore[arg-type]
    results: list[str] = []
    first = threading.Thread(target=lambda: results.append(store.update("team-a", claim)))
    first.start()
    time.sleep(0.02)  # the first write is on its way
    later = [threading.Thread(target=lambda: results.append(store.update("team-a", claim))) for _ in range(4)]
    for t in later:
        t.start()
    for t in [first, *later]:
        t.join(5)
    assert results == ["decided"] * 5
    assert api.writes == 2  # the conflict, then one write for all five


class SlowWrites(FakeApi):
    """Every ledger write answers after `delay` seconds (an API server under strain)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def request(self, method: str, path: str, **kw: Any) -> dict:
        if method in ("POST", "PUT"):
            time.sleep(self.delay)
        return super().request(method, path, **kw)


def admitted(ledger: Ledger, reads: Reads) -> tuple[Ledger, None]:
    return Ledger(entries=dict(ledger.entries), charges=dict(ledger.charges), fences={}), None


def refused(ledger: Ledger, reads: Reads) -> tuple[None, str]:
    return None, "refused"


@pytest.mark.parametrize(("delay", "busy"), [(0.0, False), (0.2, True)])
def test_an_admission_whose_write_landed_late_is_answered_retry(delay, busy):
    """A claim is stamped when decided: a write that took longer than late_write_seconds has
    eaten into the in-flight bound its request's way to storage counts on, so it says "retry"."""
    store = LedgerStore(SlowWrites(delay), late_write_seconds=0.1)
    if busy:
        with pytest.raises(LedgerBusy, match=r"took \d+\.\d s"):
            store.update("team-a", admitted)
    else:
        assert store.update("team-a", admitted) is None
    assert store.update("team-a", refused) == "refused"  # a refusal writes nothing: never late
