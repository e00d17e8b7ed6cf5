"""Quota fences (priogate.ledger.fences): when a decision counts one, as a table of the cache's
states, and what a ledger rebuilt from a quorum LIST holds."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from priogate.ledger.fences import (
    QuotaFence,
    fence_of,
    is_live,
    limiting_quotas,
    live_fences,
    seeded,
    stored_keeps,
    unexpired,
)
from priogate.ledger.model import stamp
from priogate.ledger.timing import FENCE_TTL

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
SPEC = {"hard": {"cpu": "4"}}


def quota(version: str | None, uid: str = "uid-q", cpu: str = "10") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "q", "namespace": "team-a", "uid": uid}
    if version is not None:
        meta["resourceVersion"] = version
    return {"metadata": meta, "spec": {"hard": {"cpu": cpu}}}


def fence(base: str = "5", uid: str = "uid-q", age: float = 1.0) -> QuotaFence:
    return QuotaFence("q", uid, base, SPEC, stamp(NOW - dt.timedelta(seconds=age)))


@pytest.mark.parametrize(
    ("case", "the_fence", "cached", "live"),
    [
        ("the cache has not seen the quota", fence(), None, True),
        ("the cache shows the version the change applies to", fence(), quota("5"), True),
        ("the cache is behind even that version", fence(), quota("3"), True),
        ("the cache shows the version after it: stored or not, it is decided", fence(), quota("6"), False),
        ("the cache shows another object of that name", fence(), quota("9", uid="uid-other"), True),
        ("a fence of unknown uid counts until it expires", fence(uid=""), quota("9"), True),
        ("versions that do not compare count until it expires", fence(base="x"), quota("9"), True),
        ("a create, and the cache shows the object", fence(base=""), quota("2"), False),
        ("a create the cache has not seen", fence(base=""), None, True),
        ("expired", fence(age=FENCE_TTL.total_seconds() + 1), None, False),
        ("just not expired", fence(age=FENCE_TTL.total_seconds() - 1), None, True),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_when_a_fence_counts(case, the_fence, cached, live):
    assert is_live(the_fence, {"q": cached} if cached else {}, NOW) is live, case


def test_a_fence_is_the_admitted_spec_on_the_version_it_changes():
    old, new = quota("7"), quota(None, cpu="4")
    made = fence_of(new, old, stamp(NOW))
    assert (made.quota, made.uid, made.base, made.spec) == ("q", "uid-q", "7", {"hard": {"cpu": "4"}})
    assert fence_of(new, None, stamp(NOW)).base == ""  # a create


def test_two_changes_of_one_version_are_two_fences():
    first, second = (
        fence_of(quota(None, cpu="3"), quota("7"), "t"),
        fence_of(quota(None, cpu="9"), quota("7"), "t"),
    )
    assert first.key != second.key
    assert fence_of(quota(None, cpu="3"), quota("7"), "later").key == first.key  # the same change


def test_a_decision_counts_the_cached_quotas_and_each_live_fence_as_a_quota():
    cached = [quota("5")]
    live, superseded = fence(base="5"), fence(base="4")
    counted = limiting_quotas("team-a", cached, {live.key: live, superseded.key: superseded}, NOW)
    assert counted[0] is cached[0]
    assert [q["spec"] for q in counted[1:]] == [SPEC]
    assert counted[1]["metadata"] == {"name": "q", "namespace": "team-a", "uid": "uid-q"}
    assert limiting_quotas("team-a", cached, {}, NOW) is cached


def test_a_rebuilt_ledger_fences_the_listed_quotas_until_the_cache_shows_that_version():
    (listed,) = seeded([quota("8")], stamp(NOW)).values()
    assert listed.spec == {"hard": {"cpu": "10"}}
    assert is_live(listed, {"q": quota("7")}, NOW)
    assert not is_live(listed, {"q": quota("8")}, NOW)
    (unversioned,) = seeded([quota(None)], stamp(NOW)).values()
    assert is_live(unversioned, {"q": quota("99")}, NOW)  # counted until it expires


@pytest.mark.parametrize(
    "raw",
    [
        "not an object",
        {"quota": "q", "uid": "u", "base": "1", "at": stamp(NOW)},  # no spec
        {"quota": "", "uid": "u", "base": "1", "spec": {}, "at": stamp(NOW)},
        {"quota": "q", "uid": 7, "base": "1", "spec": {}, "at": stamp(NOW)},
        {"quota": "q", "uid": "u", "base": "1", "spec": {"hard": {"cpu": "lots"}}, "at": stamp(NOW)},
        {"quota": "q", "uid": "u", "base": "1", "spec": {}, "at": "yesterday"},
    ],
)
def test_a_fence_priogate_did_not_write_is_refused(raw):
    with pytest.raises((TypeError, ValueError)):
        QuotaFence.from_json(raw)


def test_a_fence_survives_its_json():
    original = fence()
    assert QuotaFence.from_json(original.to_json()) == original


def test_a_ledger_keeps_every_fence_until_it_expires():
    ended, young = fence(base="5"), fence(base="6", age=1)
    old = fence(base="7", age=FENCE_TTL.total_seconds() + 1)
    kept = unexpired({f.key: f for f in (ended, young, old)}, NOW)
    assert set(kept) == {ended.key, young.key}  # ended in some cache: kept all the same


BOUND = dt.timedelta(seconds=5)


@pytest.mark.parametrize(
    ("case", "the_fence", "stored", "keeps"),
    [
        ("an update stored: the cache is behind", fence(base="5"), quota("6"), True),
        ("an update never stored: the quota is still at its base", fence(base="5"), quota("5"), False),
        ("the quota is gone", fence(base="5"), None, False),
        ("another object of that name", fence(base="5"), quota("9", uid="uid-other"), False),
        ("a create stored", fence(base=""), quota("3"), True),
        ("a create never stored", fence(base=""), None, False),
        ("versions that do not compare", fence(base="x"), quota("6"), True),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_past_the_bound_a_quorum_read_decides(case, the_fence, stored, keeps):
    assert stored_keeps(the_fence, stored) is keeps, case


def test_only_fences_past_the_bound_cost_a_read():
    young, old = fence(base="5", age=1), fence(base="6", age=BOUND.total_seconds() + 1)
    reads: list[str] = []

    def stored(name: str) -> dict[str, Any]:
        reads.append(name)
        return quota("6")  # still at old's base: its change was never stored

    live = live_fences({young.key: young, old.key: old}, [], NOW, BOUND, stored)
    assert set(live) == {young.key} and reads == ["q"]
    assert set(live_fences({young.key: young, old.key: old}, [], NOW)) == {young.key, old.key}
