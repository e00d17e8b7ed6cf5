"""Ledger turns that start from the watch's copy of the ledger (priogate/kube/watched_ledger.py):
a real LedgerStore and WatchedLedgers against the in-memory API server, with the
watch cache fed by hand, so what the watch has shown (and when) is up to each test."""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time

import pytest

from priogate.kube import watched_ledger
from priogate.kube.cache import WatchCache
from priogate.kube.ledger_store import LedgerStore
from priogate.kube.watched_ledger import WatchedLedgers
from priogate.ledger.codec import entries_of, ledger_object, ledger_path
from priogate.ledger.model import Entry, Ledger, Reads, stamp
from priogate.ledger.turn_order import TURN_ANNOTATION, Turn, turn_of
from tests.fake_api import FakeApi

NS = "team-a"
LEDGER_NS = "priogate-system"
LEDGER = ledger_path(LEDGER_NS, NS)
UID = "b1c2d3e4-0000-4000-8000-000000000001"


def claim(name: str):
    def decide(ledger: Ledger, _reads: Reads) -> tuple[Ledger, str]:
        entry = Entry(name, f"uid-{name}", {"cpu": "1"}, 1, "", stamp(dt.datetime.now(dt.UTC)))
        return ledger.with_entries({**ledger.entries, entry.key: entry}), "admitted"

    return decide


def refuse(seen: list[set[str]]):
    def decide(ledger: Ledger, _reads: Reads) -> tuple[None, str]:
        seen.append({e.group for e in ledger.entries.values()})
        return None, "refused"

    return decide


class World:
    def __init__(self, cache: WatchCache | None = None) -> None:
        self.api = FakeApi()
        self.cache = cache if cache is not None else WatchCache.static("ledgers", [])
        self.watched = WatchedLedgers(self.cache, LEDGER_NS)
        self.store = LedgerStore(self.api, watched=self.watched)  # type: ignore[arg-type]

    def written_by(self, writer: str, seq: int, groups: tuple[str, ...] = (), watched: bool = True) -> dict:
        """Another writer's write: stored, and (`watched`) shown by the watch."""
        entries = {}
        for name in groups:
            entry = Entry(name, f"uid-{name}", {"cpu": "1"}, 1, "", stamp(dt.datetime.now(dt.UTC)))
            entries[entry.key] = entry
        stamped = {TURN_ANNOTATION: Turn(seq, writer).annotation()}
        body = ledger_object(LEDGER_NS, NS, Ledger(entries), None, annotations=stamped)
        body["metadata"]["uid"] = UID
        stored = self.api.put_object(ledger_path(LEDGER_NS), body)
        if watched:
            self.watch()
        return stored

    def watch(self) -> None:
        """The watch delivers the stored ledger (a copy: the fake API changes its own in place)."""
        self.cache.apply_event("MODIFIED", copy.deepcopy(self.api.objects[LEDGER]))

    def gets(self) -> int:
        return len(self.api.reads_of(LEDGER))

    def stored(self) -> tuple[Turn, set[str]]:
        obj = self.api.objects[LEDGER]
        return turn_of(obj), {e.group for e in entries_of(obj).values()}


@pytest.fixture
def world() -> World:
    return World()


def test_a_turn_on_the_current_watched_copy_makes_no_get_and_stamps_its_write(world: World):
    world.written_by("pod-b", 3, ("g0",))
    assert world.store.update(NS, claim("g1")) == "admitted"
    assert world.gets() == 0
    assert world.stored() == (Turn(4, world.watched.writer), {"g0", "g1"})
    # The process's note of what it wrote last: its next turn waits for the watch to show it.
    assert world.watched.last_written(NS) == (UID, 4)


def test_a_stale_watched_copy_loses_its_precondition_and_is_decided_again_on_a_get(world: World):
    world.written_by("pod-b", 3, ("g0",))
    world.written_by("pod-b", 4, ("g0", "g2"), watched=False)  # the watch is behind
    assert world.store.update(NS, claim("g1")) == "admitted"
    assert [c.method for c in world.api.calls] == ["PUT", "GET", "PUT"]
    # Nothing the other writer admitted is lost: the second decision saw its write.
    assert world.stored() == (Turn(5, world.watched.writer), {"g0", "g1", "g2"})


def test_a_decision_that_writes_nothing_on_a_watched_copy_is_confirmed_by_a_get(world: World):
    world.written_by("pod-b", 3, ("g0",))
    world.written_by("pod-b", 4, ("g0", "g2"), watched=False)
    seen: list[set[str]] = []
    assert world.store.update(NS, refuse(seen)) == "refused"
    # Decided on the watch's copy, then again on the ledger as a GET found it: no precondition
    # proves a copy current when nothing is written.
    assert seen == [{"g0"}, {"g0", "g2"}]
    assert [c.method for c in world.api.calls] == ["GET"]


def test_until_the_watch_shows_the_pods_last_write_a_turn_waits_then_gets(world: World, monkeypatch):
    monkeypatch.setattr(watched_ledger, "WATCH_WAIT_SECONDS", 0.05)
    world.written_by("pod-b", 3, ("g0",))
    world.store.update(NS, claim("g1"))  # lands seq 4; the watch does not show it
    started = time.monotonic()
    world.store.update(NS, claim("g2"))
    assert time.monotonic() - started >= 0.05
    assert world.gets() == 1  # after the wait; the watch's copy (seq 3) would have lost its PUT
    assert world.stored() == (Turn(5, world.watched.writer), {"g0", "g1", "g2"})


def test_with_another_writer_busy_a_turn_on_the_pods_own_write_waits_for_the_others_next(world: World):
    world.written_by("pod-b", 3, ("g0",))
    world.store.update(NS, claim("g1"))  # seq 4, just after pod-b's write
    world.watch()

    def other_pod_writes() -> None:
        time.sleep(0.01)
        world.written_by("pod-b", 5, ("g0", "g1", "g2"))

    other = threading.Thread(target=other_pod_writes)
    other.start()
    world.store.update(NS, claim("g3"))
    other.join()
    # The turn waited for pod-b's write and started from it: no GET, no lost write.
    assert world.gets() == 0
    assert [c.method for c in world.api.calls] == ["PUT", "PUT"]
    assert world.stored() == (Turn(6, world.watched.writer), {"g0", "g1", "g2", "g3"})


def test_with_no_other_writer_busy_a_turn_on_the_pods_own_write_goes_at_once(world: World, monkeypatch):
    monkeypatch.setattr(watched_ledger, "WATCH_WAIT_SECONDS", 5.0)
    world.written_by("pod-b", 3, ("g0",))
    monkeypatch.setattr(watched_ledger, "OTHERS_ACTIVE_SECONDS", 0.0)
    world.store.update(NS, claim("g1"))
    world.watch()
    started = time.monotonic()
    world.store.update(NS, claim("g2"))
    assert time.monotonic() - started < 1.0
    assert world.gets() == 0
    assert world.stored() == (Turn(5, world.watched.writer), {"g0", "g1", "g2"})


def test_a_missing_watched_ledger_means_a_get_and_a_rebuilt_ledger(world: World):
    assert world.store.update(NS, claim("g1")) == "admitted"
    # The ledger, then the stored groups and the quotas it is rebuilt from.
    assert [c.method for c in world.api.calls] == ["GET", "GET", "GET", "POST"]
    turn, groups = world.stored()
    assert (turn.seq, groups) == (0, {"g1"})


def test_a_watch_of_the_records_that_is_not_current_is_not_started_from():
    world = World(WatchCache.static("ledgers", None))  # never listed: not current
    world.written_by("pod-b", 3, ("g0",))
    assert world.store.update(NS, claim("g1")) == "admitted"
    assert [c.method for c in world.api.calls] == ["GET", "PUT"]
