"""Leader-election decisions (client-go semantics) as a table."""

from __future__ import annotations

import datetime as dt

import pytest

from priogate.lease import Action, LeaseRecord, next_action, next_record, released, still_leading

ME, OTHER = "me_1", "other_2"


def rec(holder: str, duration: int = 15, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(
        holder, duration, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:00.000000Z", transitions
    )


@pytest.mark.parametrize(
    ("observed", "observed_at", "now", "want"),
    [
        (None, 0, 0, Action.CREATE),
        (rec(ME), 0, 100, Action.RENEW),  # ours: renew, however old
        (rec(""), 100, 100, Action.ACQUIRE),  # released: take it at once
        (rec(OTHER), 100, 100, Action.WAIT),
        (rec(OTHER), 100, 114.9, Action.WAIT),  # not expired on our clock
        (rec(OTHER), 100, 115.0, Action.ACQUIRE),  # expired
        (rec(OTHER, duration=30), 100, 120, Action.WAIT),  # the holder's own duration counts
        (rec(OTHER, duration=1), 100, 101.5, Action.ACQUIRE),  # a released record's 1 s
    ],
)
def test_decide(observed, observed_at, now, want):
    assert next_action(observed, observed_at, now, ME, 15.0) == want


NOW = dt.datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)


def test_records_written():
    created = next_record(Action.CREATE, None, ME, NOW, 15)
    assert created == LeaseRecord(ME, 15, "2026-05-01T12:00:00.123456Z", "2026-05-01T12:00:00.123456Z", 0)
    renewed = next_record(Action.RENEW, rec(ME, transitions=4), ME, NOW, 15)
    assert renewed.acquire_time == "2026-01-01T00:00:00.000000Z"  # kept
    assert renewed.renew_time == "2026-05-01T12:00:00.123456Z"
    assert renewed.transitions == 4
    taken = next_record(Action.ACQUIRE, rec(OTHER, transitions=4), ME, NOW, 15)
    assert taken.holder == ME and taken.transitions == 5
    assert taken.acquire_time == "2026-05-01T12:00:00.123456Z"


def test_release_empties_the_holder():
    out = released(rec(ME, transitions=2), NOW)
    assert out.holder == "" and out.lease_duration_seconds == 1 and out.transitions == 2
    assert out.to_spec()["holderIdentity"] == ""


@pytest.mark.parametrize(("last", "now", "leading"), [(0, 9.9, True), (0, 10, False), (5, 14, True)])
def test_still_leading(last, now, leading):
    assert still_leading(last, now, 10.0) is leading


def test_record_round_trips_through_a_lease():
    record = rec(OTHER, transitions=3)
    assert LeaseRecord.from_lease({"spec": record.to_spec()}) == record
    assert LeaseRecord.from_lease({"spec": {}}) == LeaseRecord("", 0, "", "", 0)
