"""The controller's sweep frees a reservation only on a quorum LIST's word: with the PodGroup
cache emptied (a relist that went wrong), a failed LIST removes nothing, and a LIST that answers
removes exactly the entries of groups it shows gone (once past the in-flight bound)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest

from controller.caches import Caches
from controller.reclaim import Reclaimer
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError
from priogate.ledger.codec import ledger_object
from priogate.ledger.memory import MemoryLedgerStore
from priogate.ledger.model import Entry, Ledger, Listing
from priogate.ledger.stored_groups import entry_of_group

LONG_AGO = "2026-01-01T00:00:00Z"


def entries() -> dict[str, Entry]:
    # Within the in-flight bound when the test runs (computed then, not at import).
    JUST_NOW = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "uid-live": Entry("live", "uid-live", {"cpu": "4"}, 1, "", LONG_AGO),
        "uid-gone": Entry("gone", "uid-gone", {"cpu": "2"}, 1, "", LONG_AGO),
        "uid-new": Entry("new", "uid-new", {"cpu": "1"}, 1, "", JUST_NOW),
    }


class Reads:
    def __init__(self, listing: Callable[[], Listing]) -> None:
        self.listing = listing
        self.calls = 0

    def quotas(self) -> list:
        return []

    def podgroups(self) -> Listing:
        self.calls += 1
        return self.listing()


def setup(listing: Callable[[], Listing]) -> tuple[Reclaimer, MemoryLedgerStore, Reads]:
    reads = Reads(listing)
    store = MemoryLedgerStore(lambda namespace: reads)
    store.ledgers["team-a"] = Ledger(entries())
    caches = Caches(
        # Empty: what a relist answered 404 used to leave behind.
        podgroups=WatchCache.static("podgroups", []),
        pods=WatchCache.static("pods", []),
        quotas=WatchCache.static("quotas", []),
        nodes=WatchCache.static("nodes", []),
        ledgers=WatchCache.static(
            "ledgers", [ledger_object("priogate-system", "team-a", Ledger(entries()), "1")]
        ),
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", []),
    )
    return Reclaimer(store, caches), store, reads  # type: ignore[arg-type]


def stored(*names: str) -> Callable[[], Listing]:
    groups = {
        f"uid-{n}": entry_of_group(
            {"metadata": {"name": n, "uid": f"uid-{n}"}, "spec": {"minResources": {"cpu": c}}}, LONG_AGO
        )
        for n, c in (("live", "4"), ("gone", "2"), ("new", "1"))
        if n in names
    }
    return lambda: Listing(groups, dt.datetime.now(dt.UTC))


def test_a_failed_quorum_list_removes_nothing() -> None:
    def failing() -> Listing:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    reclaimer, store, reads = setup(failing)
    with pytest.raises(ApiError):  # the worker retries the key with backoff
        reclaimer.reclaim("team-a")
    assert sorted(store.ledgers["team-a"].entries) == ["uid-gone", "uid-live", "uid-new"]
    assert reads.calls == 1


def test_only_what_the_quorum_list_shows_gone_is_removed() -> None:
    reclaimer, store, _ = setup(stored("live"))
    result = reclaimer.reclaim("team-a")
    assert result.dropped == ["gone"]
    # "live" is in etcd though not in the cache; "new" is still in flight.
    assert sorted(store.ledgers["team-a"].entries) == ["uid-live", "uid-new"]
    assert result.recheck_after is not None


def test_a_quorum_list_that_has_every_group_removes_nothing() -> None:
    reclaimer, store, _ = setup(stored("live", "gone", "new"))
    assert not reclaimer.reclaim("team-a").dropped
    assert len(store.ledgers["team-a"].entries) == 3
