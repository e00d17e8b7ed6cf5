"""The ledger's pure decisions, by table: resync to a quorum LIST (gone, never
stored, in flight, shrunk, refused growth, adopted, finalizer-held), which entries are worth
confirming, charges, and a damaged ledger never read as empty."""

from __future__ import annotations

import base64
import datetime as dt
import json
import zlib
from dataclasses import replace

import pytest

from priogate import clock
from priogate.ledger import model as ledger
from priogate.ledger import settlement, stored_groups
from priogate.ledger.codec import (
    CHARGES_DATA_KEY,
    COVERS_LABEL,
    LEDGER_DATA_KEY,
    covered_namespace,
    ledger_object,
    ledger_of,
    ledger_path,
    shard_key,
    shard_of,
)
from priogate.ledger.model import Charge, Entry, Ledger, Listing

NOW = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.UTC)
NOW_STAMP = ledger.stamp(NOW)
BOUND = dt.timedelta(seconds=15)


def entry(group: str, uid: str, age: float, cpu: str = "1", cls: str = "") -> Entry:
    return Entry(group, uid, {"cpu": cpu}, 1, cls, clock.rfc3339(NOW - dt.timedelta(seconds=age)))


def stored(group: str, uid: str, cpu: str = "1", cls: str = "") -> Entry:
    return Entry(group, uid, {"cpu": cpu}, 1, cls, clock.rfc3339(NOW))


def listing(*groups: Entry) -> Listing:
    return Listing({g.uid: g for g in groups}, NOW)


def claims(entries: dict[str, Entry]) -> dict[str, tuple[str, str]]:
    return {k: (e.group, e.min_resources.get("cpu", "")) for k, e in entries.items()}


@pytest.mark.parametrize(
    ("entries", "stored_groups", "expected"),
    [
        pytest.param([entry("a", "u1", 3600)], [stored("a", "u1")], {"u1": ("a", "1")}, id="stored-alive"),
        # Another replica admitted it a moment ago; its create is on its way to storage. Dropping
        # it would over-admit. (The old code's cache-based stale check kept it too, for 60 s.)
        pytest.param([entry("a", "u1", 5)], [], {"u1": ("a", "1")}, id="in-flight-kept"),
        pytest.param([entry("a", "u1", 16)], [], {}, id="gone-or-never-stored-dropped"),
        pytest.param(
            [entry("a", "u1", 120)], [stored("a", "u2")], {"u2": ("a", "1")}, id="same-name-new-uid"
        ),
        # A shrinking update was stored: the entry follows once no admission is in flight.
        pytest.param(
            [entry("a", "u1", 60, cpu="4")], [stored("a", "u1", cpu="2")], {"u1": ("a", "2")}, id="shrunk"
        ),
        # A growing update was admitted (entry raised) and then refused by a later step.
        pytest.param(
            [entry("a", "u1", 60, cpu="6")],
            [stored("a", "u1", cpu="2")],
            {"u1": ("a", "2")},
            id="refused-growth",
        ),
        # ... but while it may still be stored, the raised claim stays.
        pytest.param(
            [entry("a", "u1", 3, cpu="6")],
            [stored("a", "u1", cpu="2")],
            {"u1": ("a", "6")},
            id="growth-in-flight",
        ),
        # ... unless the stored object is of that admission's generation: then it is settled.
        pytest.param(
            [replace(entry("a", "u1", 3, cpu="6"), generation=2)],
            [replace(stored("a", "u1", cpu="2"), generation=2)],
            {"u1": ("a", "2")},
            id="growth-settled-by-generation",
        ),
        # A previous-class claim ends once the class change is settled.
        pytest.param(
            [entry("a", "u1", 3, cls="high"), entry("a", "u1", 60)],
            [stored("a", "u1", cls="high")],
            {"u1": ("a", "1")},
            id="previous-class-ends",
        ),
        # A stored group the ledger lacks (lost, rebuilt, or stored before priogate) is adopted.
        pytest.param([], [stored("b", "u9", cpu="3")], {"u9": ("b", "3")}, id="adopted"),
    ],
)
def test_resync(entries, stored_groups, expected):
    keyed = {}
    for e in entries:
        key = e.key if e.key not in keyed else e.as_shadow()[0]
        keyed[key] = e
    got = settlement.resync(keyed, listing(*stored_groups), BOUND)
    assert claims(got) == expected


def test_a_finalizer_held_group_still_reserves():
    """A group with a deletionTimestamp is still stored: a quorum LIST holds it, so it counts."""
    held = {
        "metadata": {
            "name": "a",
            "uid": "u1",
            "deletionTimestamp": "2026-11-22T11:59:00Z",
            "finalizers": ["x"],
        },
        "spec": {"minResources": {"cpu": "6"}},
    }
    got = settlement.resync(
        {"u1": entry("a", "u1", 3600, cpu="6")}, stored_groups.listing_of([held], NOW), BOUND
    )
    assert claims(got) == {"u1": ("a", "6")}


@pytest.mark.parametrize(
    ("entries", "live", "expected"),
    [
        ([entry("a", "u1", 3600)], {"u1": False}, []),  # alive in the cache: not worth a LIST
        ([entry("a", "u1", 3600)], {"u1": True}, ["u1"]),  # being deleted: maybe gone now
        ([entry("a", "u1", 3600)], {}, ["u1"]),  # not in the cache
        ([entry("a", "u1", 5)], {}, []),  # in flight: never dropped, so never worth a LIST
        ([Entry("a", "", {"cpu": "1"}, 1, "", "garbage")], {}, ["name:a"]),  # unreadable time: old
    ],
)
def test_unconfirmed(entries, live, expected):
    assert settlement.unconfirmed({e.key: e for e in entries}, live, NOW, BOUND) == expected


@pytest.mark.parametrize(
    ("entries", "stored_groups", "expected"),
    [
        # Not stored, in flight: its fate is awaited until its bound passes (12 s from now).
        pytest.param([entry("a", "u1", 3)], [], {"u1": 12.0}, id="unstored-in-flight"),
        pytest.param([entry("a", "u1", 16)], [], {}, id="past-the-bound"),
        pytest.param([entry("a", "u1", 3)], [stored("a", "u1")], {}, id="stored-as-claimed"),
        # A growing update in flight: the stored claim is smaller, so it may still change.
        pytest.param([entry("a", "u1", 3, cpu="6")], [stored("a", "u1", cpu="2")], {"u1": 12.0}, id="growth"),
        pytest.param(
            [replace(entry("a", "u1", 3, cpu="6"), generation=2)],
            [replace(stored("a", "u1", cpu="2"), generation=2)],
            {},
            id="growth-settled-by-generation",
        ),
    ],
)
def test_awaiting(entries, stored_groups, expected):
    got = settlement.awaiting({e.key: e for e in entries}, listing(*stored_groups), BOUND)
    assert {k: (t - NOW).total_seconds() for k, t in got.items()} == expected


def test_once_settled_is_the_stored_truth_with_nothing_in_flight():
    entries = {"u1": entry("a", "u1", 1, cpu="6"), "u2": entry("b", "u2", 1, cpu="3")}
    got = settlement.once_settled(entries, listing(stored("a", "u1", cpu="2")))
    assert claims(got) == {"u1": ("a", "2")}
    assert claims(settlement.resync(entries, listing(stored("a", "u1", cpu="2")), BOUND)) == {
        "u1": ("a", "6"),
        "u2": ("b", "3"),
    }


def test_a_settled_entry_that_is_the_stored_claim_stays_the_same_object():
    """The sums of priogate.ledger.totals move by identity: an equal new object would be summed
    again, and every refusal near a full quota settles every entry."""
    same, grown = entry("a", "u1", 1), entry("b", "u2", 1, cpu="6")
    got = settlement.once_settled(
        {"u1": same, "u2": grown}, listing(stored("a", "u1"), stored("b", "u2", cpu="2"))
    )
    assert got["u1"] is same
    assert got["u2"] == replace(stored("b", "u2", cpu="2"), admitted_at=grown.admitted_at)
    other_generation = replace(same, generation=3)
    assert settlement.once_settled({"u1": other_generation}, listing(stored("a", "u1")))["u1"] == same


def test_a_claim_is_stamped_to_the_microsecond_and_old_stamps_still_read():
    """Whole seconds would make a claim look up to a second older than it is, against a bound
    of a few seconds."""
    moment = NOW + dt.timedelta(microseconds=999_999)
    assert replace(entry("a", "u1", 0), admitted_at=ledger.stamp(moment)).admitted == moment
    assert entry("a", "u1", 0).admitted == NOW  # written by an older priogate


def test_merge_never_lowers_while_in_flight():
    current = Entry("a", "u1", {"cpu": "4", "memory": "1Gi"}, 2, "", "t")
    new = Entry("a", "u1", {"cpu": "6"}, 1, "", "t2")
    merged = settlement.merge(current, new)
    assert merged.min_resources == {"cpu": "6", "memory": "1Gi"} and merged.min_member == 2
    assert merged.covers(current) and merged.covers(new)
    assert not current.covers(new)


def charge(age: float, uid: str = "p1") -> Charge:
    return Charge("p", uid, "", {"cpu": "1"}, clock.rfc3339(NOW - dt.timedelta(seconds=age)))


@pytest.mark.parametrize(
    ("charges", "stored_pods", "kept"),
    [
        ({"r1": charge(3)}, {}, ["r1"]),  # maybe not in status.used yet
        ({"r1": charge(30)}, {}, []),  # past the bound: status.used has it (or it was refused)
        ({"r1": charge(3, uid="m1")}, {"m1": True}, []),  # stored, so already charged in used
        ({"r1": charge(3, uid="")}, {"": True}, ["r1"]),  # no uid: only the bound ends it
    ],
)
def test_live_charges(charges, stored_pods, kept):
    assert sorted(settlement.live_charges(charges, NOW, stored_pods, BOUND)) == kept


def test_ledger_roundtrip_lives_in_priogates_namespace():
    e = Entry(
        "g",
        "uid-1",
        ledger.normalize({"cpu": "1000m", "memory": "1024Mi"}),
        2,
        "high",
        "2026-11-22T12:00:00Z",
    )
    assert e.min_resources == {"cpu": "1", "memory": "1Gi"}
    written = Ledger({e.key: e}, {"r": charge(1)})
    obj = ledger_object("priogate-system", "team-a", written, "42")
    assert obj["metadata"]["namespace"] == "priogate-system"
    assert obj["metadata"]["name"] == "podgroup-ledger.team-a"
    assert covered_namespace(obj) == "team-a"
    assert obj["metadata"]["resourceVersion"] == "42"
    assert ledger_of(obj) == written
    assert ledger_path("priogate-system", "team-a") == (
        "/api/v1/namespaces/priogate-system/configmaps/podgroup-ledger.team-a"
    )


def test_a_relabelled_ledger_covers_nothing():
    obj = ledger_object("priogate-system", "team-a", Ledger(), None)
    obj["metadata"]["labels"][COVERS_LABEL] = "team-b"
    assert covered_namespace(obj) == ""


T = "2026-11-22T12:00:00Z"


@pytest.mark.parametrize(
    "data",
    [
        {LEDGER_DATA_KEY: "not json"},
        {LEDGER_DATA_KEY: "[1, 2]"},
        {LEDGER_DATA_KEY: '{"u": 5}'},
        {
            LEDGER_DATA_KEY: '{"u": {"group": "a", "minResources": {"cpu": "lots"}, "admittedAt": "'
            + T
            + '"}}'
        },
        {LEDGER_DATA_KEY: '{"u": {"group": "a", "minResources": {}, "admittedAt": "yesterday"}}'},
        {LEDGER_DATA_KEY: '{"u": {"group": "a", "minMember": -1, "admittedAt": "' + T + '"}}'},
        {CHARGES_DATA_KEY: '{"r": {"demand": {"cpu": "x"}, "chargedAt": "' + T + '"}}'},
    ],
)
def test_a_damaged_ledger_is_an_error_never_an_empty_ledger(data):
    with pytest.raises(ledger.DamagedLedger, match="is not a ledger"):
        ledger_of({"metadata": {"name": "podgroup-ledger.team-a"}, "data": data})


# ---- a quota lowered below the reservations: the controller says so --------------------------------


def test_a_lowered_quota_is_reported_on_the_groups_and_clears_when_it_fits():
    from priogate import phase, quota

    rq = {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": "8"}}}
    held = [stored("a", "u1", cpu="6").reservation(), stored("b", "u2", cpu="4").reservation()]
    why = quota.over_reserved([rq], held)
    assert why is not None and why.startswith(
        "quota compute (cpu=8) is below the namespace's PodGroup reservations (cpu=10)"
    )
    assert quota.over_reserved([rq], held[:1]) is None

    members, verdict = phase.Members(), phase.EnqueueVerdict(True)
    before = phase.next_status({"phase": "Inqueue"}, 1, members, verdict, "t0")
    assert all(c["type"] != phase.QUOTA_BELOW_RESERVATIONS for c in before["conditions"])
    over = phase.next_status(before, 1, members, verdict, "t1", why)
    event = phase.quota_event(before, over)
    assert event is not None and event.type == "Warning" and event.reason == "QuotaBelowReservations"
    assert phase.quota_event(over, phase.next_status(over, 1, members, verdict, "t2", why)) is None
    cleared = phase.next_status(over, 1, members, verdict, "t3", None)
    got = {c["type"]: c["status"] for c in cleared["conditions"]}
    assert got[phase.QUOTA_BELOW_RESERVATIONS] == "False"


def raw_entry(**fields: object) -> dict:
    """An entry as the ledger stores it (without generation, as ledgers before it did)."""
    return {
        "group": "a",
        "minResources": {"cpu": "1"},
        "minMember": 1,
        "priorityClassName": "",
        "admittedAt": NOW_STAMP,
        **fields,
    }


def test_parsed_entries_are_reused_only_for_the_same_content():
    raw = raw_entry()
    first = ledger.Entry.from_json("uid-a", raw)
    assert ledger.Entry.from_json("uid-a", dict(raw)) is first
    assert ledger.Entry.from_json("uid-b", raw) is not first
    assert ledger.Entry.from_json("uid-a", {**raw, "minResources": {"cpu": "2"}}).min_resources == {
        "cpu": "2"
    }
    for damaged in ({**raw, "minMember": True}, {**raw, "minMember": -1}, {**raw, "admittedAt": "yesterday"}):
        for _ in range(2):  # a refusal is never remembered as an entry
            with pytest.raises((TypeError, ValueError)):
                ledger.Entry.from_json("uid-a", damaged)
    group = {
        "metadata": {"name": "a", "uid": "uid-a", "generation": 2},
        "spec": {"minResources": {"cpu": "1"}},
    }
    stored = stored_groups.entry_of_group(group, NOW_STAMP)
    assert stored_groups.entry_of_group(group, NOW_STAMP) is stored
    assert stored_groups.entry_of_group(
        {**group, "spec": {"minResources": {"cpu": "3"}}}, NOW_STAMP
    ).min_resources == {"cpu": "3"}
    with pytest.raises(ValueError):
        stored_groups.entry_of_group({**group, "spec": {"minMember": True}}, NOW_STAMP)


def test_an_entry_read_again_is_reused_only_for_the_same_values_and_types():
    raw = raw_entry(generation=1)
    first = ledger.Entry.from_json("uid-same", raw)
    assert first.written_as(raw)
    assert ledger.Entry.from_json("uid-same", dict(raw)) is first
    # equal under == but not what priogate writes: refused as damaged, never taken for the entry
    for damaged in ({**raw, "minMember": True}, {**raw, "minMember": 1.0}, {**raw, "generation": True}):
        assert not first.written_as(damaged)
        with pytest.raises(TypeError):
            ledger.Entry.from_json("uid-same", damaged)
    assert ledger.Entry.from_json("uid-same", raw) is first


def test_each_shard_is_the_json_of_its_entries_sorted():
    entries = {
        e.key: e
        for e in (
            Entry("b", "uid-2", {"cpu": "1"}, 1, "", NOW_STAMP, 3),
            Entry("a", "uid-1", {"memory": "1Gi", "cpu": "500m"}, 2, "high", NOW_STAMP),
            Entry('odd "name"', "", {}, 0, "", NOW_STAMP),
        )
    }
    obj = ledger_object("priogate-system", "team-a", Ledger(entries), None)
    stored = {}
    for name, packed in obj["data"].items():
        if name in (LEDGER_DATA_KEY, CHARGES_DATA_KEY):
            continue
        text = zlib.decompress(base64.b64decode(packed)).decode()
        shard = {key: e.to_json() for key, e in entries.items() if shard_key(shard_of(key)) == name}
        assert text == json.dumps(shard, separators=(",", ":"), sort_keys=True)
        stored.update(json.loads(text))
    assert stored == {key: e.to_json() for key, e in entries.items()}
    assert ledger_of(obj).entries == entries
