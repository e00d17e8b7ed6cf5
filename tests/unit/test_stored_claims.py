"""priogate.ledger.stored_claims: the stored groups' claims, sums and deletions kept by the
watch's events are, after any sequence of events, what a fresh parse of the cache would give."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from priogate.ledger.model import stamp
from priogate.ledger.stored_claims import EMPTY, StoredClaims
from priogate.ledger.stored_groups import claims_by_uid, parse_groups
from priogate.ledger.totals import EntryTotals
from priogate.quota import Reservation
from tests.builders import podgroup

ADMITTED_AT = stamp(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
NAMESPACES = ("a", "b")


def _group(namespace: str, name: str, uid: str, cpu: str, cls: str, deleting: bool = False) -> dict:
    group = podgroup(
        name,
        namespace=namespace,
        uid=uid,
        min_member=1,
        min_resources={"cpu": cpu},
        priority_class=cls or None,
    )
    if deleting:  # held by a finalizer: still stored, still claiming
        group["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return group


def _live(objects: dict[tuple[str, str], dict], namespace: str) -> dict[str, bool]:
    """uid -> being deleted, of every cached group, whether its claim parses or not."""
    return {
        o["metadata"]["uid"]: "deletionTimestamp" in o["metadata"]
        for (ns, _), o in objects.items()
        if ns == namespace
    }


def _fresh(objects: dict[tuple[str, str], dict], namespace: str) -> dict:
    return claims_by_uid(parse_groups([o for (ns, _), o in objects.items() if ns == namespace], ADMITTED_AT))


def _totals(reservations: list[Reservation]) -> dict[str, dict[str, Fraction]]:
    """By class, the non-zero amounts (a class summed back to zero reserves nothing)."""
    out = {r.priority_class: {k: v for k, v in r.demand.items() if v} for r in reservations}
    return {cls: amounts for cls, amounts in out.items() if amounts}


events = st.lists(
    st.tuples(
        st.sampled_from(("ADDED", "MODIFIED", "DELETED", "SYNC")),
        st.sampled_from(NAMESPACES),
        st.sampled_from(("g1", "g2", "g3")),
        st.sampled_from(("1", "2")),  # the group's incarnation: a name created again has a new uid
        st.sampled_from(("1", "250m", "2", "-1", "x")),  # "x" does not parse: no claim
        st.sampled_from(("", "high")),
        st.booleans(),  # being deleted
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(before=events, after=events)
def test_events_keep_what_a_fresh_parse_of_the_cache_gives(before, after):
    cache: dict[tuple[str, str], dict] = {}
    stored = StoredClaims(ADMITTED_AT)

    def apply(event: tuple, hear: bool) -> None:
        kind, namespace, name, incarnation, cpu, cls, deleting = event
        obj = _group(namespace, name, f"{namespace}-{name}-{incarnation}", cpu, cls, deleting)
        if kind == "DELETED":
            obj = cache.pop((namespace, name), obj)
        else:
            cache[(namespace, name)] = obj
        if hear:
            stored.on_event(kind, obj)

    for event in before:  # before the index exists: only the fill sees these
        apply(event, hear=False)
    stored.fill(lambda: list(cache.values()))
    for event in after:
        apply(event, hear=True)
        for namespace in NAMESPACES:
            now = stored.of(namespace)
            fresh = _fresh(cache, namespace)
            assert dict(now.claims) == fresh
            assert dict(now.live) == _live(cache, namespace)
            for leave_out in [*fresh, "none"]:
                expected = EntryTotals().others(fresh, leave_out)
                assert _totals(now.others(leave_out)) == _totals(expected)


def test_a_namespace_with_no_groups_left_is_empty_and_forgotten():
    stored = StoredClaims(ADMITTED_AT)
    group = _group("a", "g", "u", "1", "")
    stored.on_event("ADDED", group)
    assert set(stored.of("a").claims) == {"u"}
    stored.on_event("DELETED", group)
    assert stored.of("a") is EMPTY
    assert stored.of("a").others("u") == []


def test_a_snapshot_stays_as_it_was_when_later_events_come():
    stored = StoredClaims(ADMITTED_AT)
    stored.on_event("ADDED", _group("a", "g1", "u1", "1", ""))
    first = stored.of("a")
    assert stored.of("a") is first  # nothing changed: the same snapshot, not a copy
    stored.on_event("ADDED", _group("a", "g2", "u2", "2", ""))
    assert set(first.claims) == {"u1"}
    assert set(stored.of("a").claims) == {"u1", "u2"}
    assert _totals(stored.of("a").others("none"))[""]["cpu"] == 3


def test_a_name_created_again_with_another_uid_claims_once():
    stored = StoredClaims(ADMITTED_AT)
    stored.on_event("ADDED", _group("a", "g", "u1", "1", ""))
    stored.on_event("MODIFIED", _group("a", "g", "u2", "2", ""))
    assert set(stored.of("a").claims) == {"u2"}
    assert _totals(stored.of("a").others("none"))[""]["cpu"] == 2
