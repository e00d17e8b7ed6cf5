"""HostTurns: worker processes of one pod take a namespace's ledger turns one at a time, and a turn
that cannot have the lock in time goes ahead without it (the ledger's precondition still decides).

Each LedgerStore below stands for one worker process: flock(2) locks belong to an open file, so
two opens in one process contend exactly as two processes do.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

from priogate.kube.host_turn import HostTurns
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger.codec import entries_of, ledger_path
from priogate.ledger.model import Entry, Ledger, Reads, stamp
from tests.fake_api import FakeApi


def test_a_held_turn_makes_the_other_wait_until_its_deadline_then_go_ahead_without(tmp_path: Path) -> None:
    first, second = HostTurns("cluster-a", tmp_path), HostTurns("cluster-a", tmp_path)
    with first.turn("team-a", time.monotonic() + 1) as held:
        assert held
        started = time.monotonic()
        with second.turn("team-a", started + 0.1) as also:
            assert not also
            assert time.monotonic() - started >= 0.1
        with second.turn("team-b", time.monotonic()) as other_namespace:
            assert other_namespace
        with HostTurns("cluster-b", tmp_path).turn("team-a", time.monotonic()) as other_cluster:
            assert other_cluster
    with second.turn("team-a", time.monotonic()) as after:
        assert after


def test_an_unusable_directory_means_no_host_turns_not_an_error(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    turns = HostTurns("cluster-a", blocked)
    with turns.turn("team-a", time.monotonic() + 1) as held:
        assert not held
    assert not turns.usable


class SlowApi(FakeApi):
    """Each call takes a moment, as through kube-apiserver, so unsynchronized turns overlap."""

    def get(self, path, **kw):
        time.sleep(0.003)
        return super().get(path, **kw)

    def request(self, method, path, **kw):
        time.sleep(0.003)
        return super().request(method, path, **kw)


class NoReads:
    def quotas(self):
        return []

    def podgroups(self):
        raise AssertionError("not read: the ledger exists")


def _claims(tmp_path: Path, host_turns: bool) -> tuple[int, dict[str, Entry]]:
    api = SlowApi()
    api.put_object(ledger_path("priogate-system"), {"metadata": {"name": "podgroup-ledger.team-a"}})
    conflicts: list[int] = []
    stores = [
        LedgerStore(
            api,  # type: ignore[arg-type]
            on_conflict=lambda: conflicts.append(1),
            host_turns=HostTurns("cluster-a", tmp_path) if host_turns else None,
        )
        for _ in range(2)
    ]

    def claim(name: str):
        def decide(ledger: Ledger, _reads: Reads) -> tuple[Ledger, None]:
            entry = Entry(name, f"uid-{name}", {"cpu": "1"}, 1, "", stamp(dt.datetime.now(dt.UTC)))
            return ledger.with_entries({**ledger.entries, entry.key: entry}), None

        return decide

    threads = [
        threading.Thread(target=stores[i % 2].update, args=("team-a", claim(f"g{i}"))) for i in range(16)
    ]
    for t in threads:
        t.start()
        time.sleep(0.001)
    for t in threads:
        t.join(10)
    return len(conflicts), entries_of(api.get(ledger_path("priogate-system", "team-a")))


def test_two_processes_with_host_turns_never_race_and_lose_no_claim(tmp_path: Path) -> None:
    conflicts, entries = _claims(tmp_path, host_turns=True)
    assert sorted(e.group for e in entries.values()) == sorted(f"g{i}" for i in range(16))
    assert conflicts == 0


def test_without_host_turns_the_same_load_races(tmp_path: Path) -> None:
    # The contrast that shows the test above measures something: the same two stores, racing.
    results = [_claims(tmp_path, host_turns=False) for _ in range(3)]
    assert all(len(entries) == 16 for _, entries in results)
    assert any(conflicts > 0 for conflicts, _ in results)


def test_the_pods_note_of_its_last_write_is_shared_by_its_processes_and_no_one_else(tmp_path: Path) -> None:
    worker_a, worker_b = HostTurns("cluster-a", tmp_path), HostTurns("cluster-a", tmp_path)
    assert worker_b.last_written("team-a") == ("", -1)
    worker_a.note_written("team-a", "uid-1", 4)
    assert worker_b.last_written("team-a") == ("uid-1", 4)
    assert worker_b.last_written("team-b") == ("", -1)
    assert HostTurns("cluster-b", tmp_path).last_written("team-a") == ("", -1)
    assert worker_a.identity == worker_b.identity != HostTurns("cluster-a", tmp_path / "other").identity


def test_without_a_usable_directory_each_process_keeps_its_own_note(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    turns = HostTurns("cluster-a", blocked)
    with turns.turn("team-a", time.monotonic() + 1):
        turns.note_written("team-a", "uid-1", 4)
    assert turns.last_written("team-a") == ("uid-1", 4)
    assert HostTurns("cluster-a", blocked).last_written("team-a") == ("", -1)
