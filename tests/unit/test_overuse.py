"""priogate.overuse: which members are surplus, which a waiting group may take, which are chosen."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from priogate.overuse import Candidate, Member, candidates, choose, surplus

F = Fraction


def m(
    name: str,
    cpu: int | str = 1,
    *,
    priority: int = 0,
    second: int = 0,
    protected: bool = False,
    last_resort: bool = False,
) -> Member:
    return Member(
        name,
        f"uid-{name}",
        priority,
        f"2026-01-01T00:00:{second:02d}Z",
        {"cpu": F(cpu)},
        protected=protected,
        last_resort=last_resort,
    )


def names(members: list[Member]) -> list[str]:
    return [x.name for x in members]


@pytest.mark.parametrize(
    ("members", "min_member", "min_cpu", "want"),
    [
        # Kept: the oldest until minMember and minResources are met; the rest newest first.
        ([m("a", second=1), m("b", second=2), m("c", second=3)], 1, 1, ["c", "b"]),
        # minResources needs two of them, minMember one.
        ([m("a", second=1), m("b", second=2), m("c", second=3)], 1, 2, ["c"]),
        # minMember needs all three.
        ([m("a", second=1), m("b", second=2), m("c", second=3)], 3, 1, []),
        # Below the minimum: nothing is surplus (the gang is not taken further apart).
        ([m("a", second=1)], 2, 1, []),
        ([m("a", second=1), m("b", second=2)], 1, 5, []),
        # minMember 0 counts as 1.
        ([m("a", second=1), m("b", second=2)], 0, 0, ["b"]),
        # Higher priority is kept first, whatever its age; lowest priority is evicted first.
        ([m("a", second=1), m("b", priority=5, second=2), m("c", second=3)], 1, 1, ["c", "a"]),
        # Protected members are kept first: the newest opted-out member keeps the minimum.
        ([m("a", second=1), m("b", second=2), m("c", second=3, protected=True)], 1, 1, ["b", "a"]),
        # Soft opt-out: kept first too, and when surplus, evicted last.
        (
            [m("a", second=1, last_resort=True), m("b", second=2, last_resort=True), m("c", second=3)],
            1,
            1,
            ["c", "b"],
        ),
    ],
)
def test_surplus(members: list[Member], min_member: int, min_cpu: int, want: list[str]):
    min_resources = {"cpu": F(min_cpu)} if min_cpu else {}
    assert names(surplus(members, min_member, min_resources)) == want


def test_a_resource_the_members_do_not_request_is_never_covered():
    assert surplus([m("a"), m("b")], 1, {"nvidia.com/gpu": F(1)}) == []


def test_candidates_are_of_the_waiting_groups_priority_and_not_of_a_higher_group():
    groups = [
        ("low-group", 0, [m("x", priority=0), m("y", priority=10)]),
        ("same", 10, [m("s1", priority=10, second=1), m("s2", priority=10, second=2)]),
        ("above", 20, [m("h", priority=10)]),
        ("opted", 10, [m("o", priority=10, protected=True)]),
    ]
    found = candidates(10, groups)
    # x: lower priority (gang preemption's); h: of a higher group; o: protected.
    assert [(c.group, c.member.name) for c in found] == [("same", "s2"), ("same", "s1"), ("low-group", "y")]


@pytest.mark.parametrize(
    ("shortfall", "leaving", "sizes", "want"),
    [
        ({"cpu": 2}, {}, [1, 1, 1], ["c0", "c1"]),  # only what is lacking
        ({"cpu": 2}, {"cpu": 1}, [1, 1, 1], ["c0"]),  # what is already leaving counts
        ({"cpu": 2}, {"cpu": 2}, [1, 1, 1], []),  # nothing lacking any more
        ({"cpu": 5}, {}, [1, 1, 1], []),  # cannot be covered: nothing at all
        ({}, {}, [1], []),
        ({"cpu": F("1.5")}, {}, [1, 1], ["c0", "c1"]),
    ],
)
def test_choose(shortfall: dict, leaving: dict, sizes: list[int], want: list[str]):
    found = [Candidate("g", m(f"c{i}", size)) for i, size in enumerate(sizes)]
    got = choose({k: F(v) for k, v in shortfall.items()}, {k: F(v) for k, v in leaving.items()}, found)
    assert [c.member.name for c in got] == want


def test_a_candidate_that_frees_nothing_lacking_is_passed_over():
    memory_only = Member("mem", "u", 0, "", {"memory": F(10**9)})
    cpu = m("cpu")
    got = choose({"cpu": F(1)}, {}, [Candidate("g", memory_only), Candidate("g", cpu)])
    assert [c.member.name for c in got] == ["cpu"]


member_st = st.builds(
    lambda i, cpu, priority, second, protected: m(
        f"p{i}", cpu, priority=priority, second=second, protected=protected
    ),
    st.integers(0, 10**6),
    st.integers(0, 4),
    st.integers(0, 3),
    st.integers(0, 59),
    st.booleans(),
)


@given(
    st.lists(member_st, max_size=8, unique_by=lambda x: x.name),
    st.integers(0, 6),
    st.integers(0, 8),
)
def test_the_kept_members_always_meet_the_minimum(members: list[Member], min_member: int, min_cpu: int):
    extra = surplus(members, min_member, {"cpu": F(min_cpu)})
    taken = {x.name for x in extra}
    assert taken <= {x.name for x in members}
    if not extra:
        return
    kept = [x for x in members if x.name not in taken]
    assert len(kept) >= max(min_member, 1)
    assert sum((x.requests["cpu"] for x in kept), F(0)) >= min_cpu
    # Protected members are kept before any unprotected one is.
    assert not any(x.protected for x in extra) or all(x.protected for x in kept)


@given(
    st.lists(member_st, max_size=8, unique_by=lambda x: x.name),
    st.integers(0, 10),
    st.integers(0, 3),
)
def test_choose_covers_the_shortfall_and_is_minimal(members: list[Member], short: int, leaving: int):
    found = [Candidate("g", x) for x in members]
    got = choose({"cpu": F(short)}, {"cpu": F(leaving)}, found)
    freed = sum((c.member.requests["cpu"] for c in got), F(0))
    lacking = short - leaving
    if got:
        assert freed >= lacking > 0
        # Minimal as a prefix: without the last one chosen it would not be covered.
        assert freed - got[-1].member.requests["cpu"] < lacking
        assert all(c.member.requests["cpu"] > 0 for c in got)
    else:
        assert lacking <= 0 or sum((x.requests["cpu"] for x in members), F(0)) < lacking


# ---- what a waiting group lacks (priogate.enqueue_index.Verdicts.shortfall) --------------------


def test_shortfall_is_what_capacity_alone_lacks():
    from priogate.enqueue import BoundPod, GroupDemand
    from priogate.enqueue_index import Verdicts
    from priogate.running_sums import HeldByPriority

    def demand(key: str, cpu: str, phase: str = "Pending", priority: int = 0, preempts: bool = True):
        return GroupDemand(
            key=f"ns/{key}",
            namespace="ns",
            priority_class="",
            priority=priority,
            preempts=preempts,
            phase=phase,
            min_member=1,
            min_resources={"cpu": F(cpu)},
            consumed={},
        )

    bound = HeldByPriority.of_pods([BoundPod(0, {"cpu": F(7)}), BoundPod(-5, {"cpu": F(2)})])
    waiting = demand("w", "4")
    quota = [{"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": "2"}}, "status": {"used": {}}}]

    def shortfall(group: GroupDemand, quotas: list | None = None):
        verdicts = Verdicts({"ns": [group]}, bound, {"cpu": F(10)}, lambda _ns: quotas or [])
        return verdicts.shortfall(group)

    # 10 allocatable, 7 held at priority >= 0 (the lower pod's 2 do not count): 1 cpu short.
    assert shortfall(waiting) == {"cpu": F(1)}
    assert shortfall(demand("w", "3")) == {}
    # Not by capacity alone: a quota refuses it, it could never fit, or it is admitted.
    assert shortfall(waiting, quota) is None
    assert shortfall(demand("w", "11")) is None
    assert shortfall(demand("w", "4", phase="Inqueue")) is None
    # A group that may not preempt counts the lower pod too.
    assert shortfall(demand("w", "4", preempts=False)) == {"cpu": F(3)}
