"""priogate.ledger.totals: the running per-class sums give every quota the same reserved amounts,
and so the same decisions, as summing the other entries afresh, whatever the ledger does between
two calls."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from priogate.ledger.model import Entry, Ledger
from priogate.ledger.totals import EntryTotals, TotalsByNamespace
from priogate.quota import Reservation, check_podgroup, class_totals, positive_nanos


def entry(uid: str, cpu: str = "1", cls: str = "", memory: str | None = None, at: str = "") -> Entry:
    amounts = {"cpu": cpu} | ({"memory": memory} if memory else {})
    return Entry(uid, uid, amounts, 1, cls, at or "2026-11-26T08:00:00.000000Z")


def afresh(entries: Mapping[str, Entry], leave_out: str) -> dict[str, dict[str, Fraction]]:
    others = [e.reservation() for k, e in entries.items() if k != leave_out]
    return sums(class_totals((r.priority_class, positive_nanos(r)) for r in others))


def sums(reservations: list[Reservation]) -> dict[str, dict[str, Fraction]]:
    """Per class, the non-zero amounts (a class whose entries all left keeps zeros)."""
    out = {r.priority_class: {n: a for n, a in r.demand.items() if a} for r in reservations}
    return {cls: amounts for cls, amounts in out.items() if amounts}


A, B, C = entry("a", "1"), entry("b", "2", "high"), entry("c", "500m", memory="1Gi")

CASES = [
    # (name, ledgers given one after another, the key left out of the last)
    ("one ledger", [{"a": A, "b": B, "c": C}], "a"),
    ("an entry added", [{"a": A}, {"a": A, "b": B}], "zzz"),
    ("an entry removed", [{"a": A, "b": B, "c": C}, {"a": A, "c": C}], "zzz"),
    ("an entry raised", [{"a": A, "b": B}, {"a": entry("a", "3"), "b": B}], "b"),
    ("a class changed", [{"a": A, "b": B}, {"a": entry("a", "1", "high"), "b": B}], "zzz"),
    ("the claim's own entry left out", [{"a": A, "b": B}], "b"),
    ("another namespace's ledger", [{"a": A, "b": B}, {"x": entry("x", "7"), "y": entry("y", "1")}], "x"),
    ("back to an earlier ledger", [{"a": A, "b": B, "c": C}, {"a": A}, {"a": A, "b": B, "c": C}], "c"),
    ("empty", [{"a": A}, {}], "a"),
    ("a negative amount counts as nothing", [{"a": A, "n": entry("n", "-5")}], "zzz"),
]


@pytest.mark.parametrize(("name", "ledgers", "leave_out"), CASES, ids=[c[0] for c in CASES])
def test_the_running_sums_are_the_sums_afresh(name, ledgers, leave_out):
    totals = EntryTotals()
    for ledger in ledgers:
        got = totals.others(ledger, leave_out)
    assert sums(got) == afresh(ledgers[-1], leave_out)


QUOTAS = [
    {"metadata": {"name": "all"}, "spec": {"hard": {"cpu": "10", "memory": "4Gi"}}},
    {
        "metadata": {"name": "high-only"},
        "spec": {
            "hard": {"requests.cpu": "4"},
            "scopeSelector": {
                "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]
            },
        },
    },
]

uids = st.sampled_from([f"g{i}" for i in range(8)])
entries_st = st.builds(
    entry,
    uids,
    st.sampled_from(["0", "100m", "1", "2", "3", "-1"]),
    st.sampled_from(["", "high", "low"]),
    st.sampled_from([None, "512Mi", "1Gi"]),
)
ledgers_st = st.lists(st.lists(entries_st, max_size=8), min_size=1, max_size=6).map(
    lambda ledgers: [{e.key: e for e in ledger} for ledger in ledgers]
)


@settings(max_examples=300, deadline=None)
@given(ledgers=ledgers_st, claim=entries_st)
def test_every_decision_is_the_one_made_on_the_sums_afresh(ledgers, claim):
    """The refusal's message holds the reserved amounts, so equal messages mean equal sums."""
    totals = EntryTotals()
    for ledger in ledgers:
        kept = totals.others(ledger, claim.key)
        others = [e.reservation() for k, e in ledger.items() if k != claim.key]
        assert check_podgroup(QUOTAS, kept, claim.reservation()) == check_podgroup(
            QUOTAS, others, claim.reservation()
        )


def test_each_namespace_keeps_its_own_sums_and_the_number_kept_is_bounded():
    by_namespace = TotalsByNamespace(kept=2)
    assert by_namespace("ns-a") is by_namespace("ns-a")
    assert by_namespace("ns-b") is not by_namespace("ns-a")
    first = by_namespace("ns-a")
    by_namespace("ns-c")  # a third: all forgotten, rebuilt on demand
    assert by_namespace("ns-a") is not first


@settings(max_examples=200, deadline=None)
@given(ledgers=ledgers_st, what_if=st.lists(entries_st, max_size=8), claim=entries_st)
def test_a_fork_sums_a_what_if_map_and_leaves_the_ledger_sums_alone(ledgers, what_if, claim):
    totals = EntryTotals()
    for ledger in ledgers:
        totals.others(ledger, claim.key)
    what_if_map = {**ledgers[-1], **{e.key: e for e in what_if}}
    for key in list(what_if_map)[::2]:
        del what_if_map[key]
    assert sums(totals.fork().others(what_if_map, claim.key)) == afresh(what_if_map, claim.key)
    kept = dict(totals._entries)
    assert sums(totals.others(ledgers[-1], claim.key)) == afresh(ledgers[-1], claim.key)
    assert totals._entries == kept  # nothing moved: the fork took the what-if's moves


# A step on a chain of ledgers: changes made with Ledger.updated (a uid alone removes its key),
# a ledger made anew (as a read makes one), a copy with other charges, or an earlier ledger again.
steps_st = st.lists(
    st.one_of(
        st.tuples(st.just("updated"), st.lists(st.one_of(entries_st, uids), max_size=3)),
        st.tuples(st.just("anew"), st.lists(entries_st, max_size=8)),
        st.tuples(st.just("charges"), st.none()),
        st.tuples(st.just("earlier"), st.integers(min_value=0, max_value=10)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps_st, claim=entries_st)
def test_sums_that_follow_ledgers_by_their_changes_are_the_sums_afresh(steps, claim):
    """A turn's batch decides on ledgers each made from the last by Ledger.updated: the sums move
    by the keys it names. Whatever comes between (a ledger read anew, an older one, a copy), every
    call gives the sums afresh."""
    totals = EntryTotals()
    made = [Ledger()]
    for kind, arg in steps:
        last = made[-1]
        if kind == "updated":
            made.append(last.updated({_key(c): None if isinstance(c, str) else c for c in arg}))
        elif kind == "anew":
            made.append(Ledger({e.key: e for e in arg}))
        elif kind == "charges":
            made.append(last.with_charges({}))
        else:
            made.append(made[arg % len(made)])
        ledger = made[-1]
        assert sums(totals.others(ledger, claim.key)) == afresh(ledger.entries, claim.key)


def _key(change: Entry | str) -> str:
    return change if isinstance(change, str) else change.key
