"""The controller's ledger sweep frees a reservation only on a quorum LIST's word: with the
PodGroup cache emptied (a relist that went wrong), a failed LIST removes nothing, and a LIST
that answers removes exactly the entries of groups it shows gone."""

from __future__ import annotations

import datetime as dt

from controller.caches import Caches
from controller.reclaim import Reclaimer
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError
from priogate.ledger import Entry, MemoryLedgerStore, ledger_object

NOW = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
LONG_AGO = "2026-11-23T10:00:00Z"
JUST_NOW = "2026-11-23T11:59:50Z"  # within the 60 s grace


def entries() -> dict[str, Entry]:
    return {
        "uid-live": Entry("live", "uid-live", {"cpu": "4"}, 1, "", LONG_AGO),
        "uid-gone": Entry("gone", "uid-gone", {"cpu": "2"}, 1, "", LONG_AGO),
        "uid-new": Entry("new", "uid-new", {"cpu": "1"}, 1, "", JUST_NOW),
    }


def setup(list_groups) -> tuple[Reclaimer, MemoryLedgerStore]:
    store = MemoryLedgerStore()
    store.ledgers["team-a"] = entries()
    caches = Caches(
        # Empty: what a relist answered 404 used to leave behind.
        podgroups=WatchCache.static("podgroups", []),
        pods=WatchCache.static("pods", []),
        quotas=WatchCache.static("quotas", []),
        nodes=WatchCache.static("nodes", []),
        ledgers=WatchCache.static("ledgers", [ledger_object("team-a", entries(), "1")]),
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", []),
    )
    return Reclaimer(store, caches, list_groups=list_groups), store  # type: ignore[arg-type]


def test_a_failed_quorum_list_removes_nothing() -> None:
    calls = []

    def failing(namespace: str) -> dict[str, str]:
        calls.append(namespace)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    reclaimer, store = setup(failing)
    assert reclaimer.reclaim("team-a", now=NOW) == []
    assert sorted(store.ledgers["team-a"]) == ["uid-gone", "uid-live", "uid-new"]
    assert calls == ["team-a"]


def test_only_what_the_quorum_list_shows_gone_is_removed() -> None:
    reclaimer, store = setup(lambda namespace: {"uid-live": "live"})
    assert reclaimer.reclaim("team-a", now=NOW) == ["uid-gone"]
    # "live" is in etcd though not in the cache; "new" is within the grace.
    assert sorted(store.ledgers["team-a"]) == ["uid-live", "uid-new"]


def test_a_quorum_list_that_has_every_group_removes_nothing() -> None:
    reclaimer, store = setup(lambda namespace: {"uid-live": "live", "uid-gone": "gone"})
    assert reclaimer.reclaim("team-a", now=NOW) == []
    assert len(store.ledgers["team-a"]) == 3
