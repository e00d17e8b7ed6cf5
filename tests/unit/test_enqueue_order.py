"""The enqueue policy's order (priority, then creation time), its stranding rule (a group's
demand counted once whatever its members' state) and the Inqueue -> Pending rollback reasons,
as tables."""

from __future__ import annotations

from fractions import Fraction

import pytest

from priogate.enqueue import BoundPod, GroupDemand, backing_off, inqueue_timed_out
from priogate.enqueue_index import verdict
from priogate.phase import (
    INQUEUE_TIMEOUT,
    NOT_ENOUGH_RESOURCES,
    EnqueueVerdict,
    Members,
    desired_conditions,
    next_phase,
    phase_event,
)
from tests.unit.enqueue_reference import waiting_ahead

F = Fraction


def g(
    key: str,
    cpu: int,
    *,
    priority: int = 100,
    created: str = "2026-01-01T00:00:00Z",
    phase: str = "Pending",
    ns: str = "ns",
    min_member: int = 1,
    charged: int = 0,
    created_members: int = 0,
    consumed: int = 0,
    backing_off: bool = False,
    order_by: str = "priority",
) -> GroupDemand:
    return GroupDemand(
        key=f"{ns}/{key}",
        namespace=ns,
        priority_class="",
        priority=priority,
        preempts=True,
        phase=phase,
        min_member=min_member,
        min_resources={"cpu": F(cpu)},
        consumed={"cpu": F(consumed)} if consumed else {},
        charged={"cpu": F(charged)} if charged else {},
        created_members=created_members,
        created_at=created,
        backing_off=backing_off,
        order_by=order_by,
    )


def quota(hard: int, used: int) -> dict:
    return {
        "metadata": {"name": "q"},
        "spec": {"hard": {"cpu": str(hard)}},
        "status": {"used": {"cpu": str(used)}},
    }


T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "2026-01-01T00:00:10Z"
ALLOC = {"cpu": F(10)}

# ---- order ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "other", "me", "admitted"),
    [
        # capacity 10: the other group wants 6, this one 6; only one of them fits
        ("older, same priority, waiting: ahead", g("a", 6, created=T0), g("b", 6, created=T1), False),
        ("younger, same priority, waiting: behind", g("a", 6, created=T2), g("b", 6, created=T1), True),
        (
            "younger but higher priority: ahead",
            g("a", 6, priority=200, created=T2),
            g("b", 6, created=T1),
            False,
        ),
        ("older but lower priority: behind", g("a", 6, priority=50, created=T0), g("b", 6, created=T1), True),
        ("same time, same priority: by name", g("a", 6), g("b", 6), False),
        ("same time, same priority: by name (behind)", g("c", 6), g("b", 6), True),
        (
            "older, backing off: holds nothing",
            g("a", 6, created=T0, backing_off=True),
            g("b", 6, created=T1),
            True,
        ),
        (
            "older but never fits the cluster: holds nothing",
            g("a", 11, created=T0),
            g("b", 6, created=T1),
            True,
        ),
        (
            "older, waiting in another namespace: its own queue, holds nothing here",
            g("a", 6, created=T0, ns="x"),
            g("b", 6, created=T1),
            True,
        ),
        (
            "higher priority, waiting in another namespace: holds nothing here either",
            g("a", 6, priority=200, created=T0, ns="x"),
            g("b", 6, created=T1),
            True,
        ),
        (
            "older, holding (Inqueue): holds",
            g("a", 6, created=T2, phase="Inqueue"),
            g("b", 6, created=T1),
            False,
        ),
        (
            "holding (Inqueue) in another namespace: capacity is shared",
            g("a", 6, created=T2, phase="Inqueue", ns="x"),
            g("b", 6, created=T1),
            False,
        ),
        # an admitted group keeps its place: waiting groups ahead do not count in its re-check
        (
            "me Inqueue, an older waiting one",
            g("a", 6, priority=200, created=T0),
            g("b", 6, created=T1, phase="Inqueue"),
            True,
        ),
    ],
)
def test_capacity_order(case, other, me, admitted):
    assert verdict(me, [], ALLOC, [], [other]).admitted is admitted, case


@pytest.mark.parametrize(
    ("case", "other", "me", "admitted"),
    [
        # quota cpu 8, nothing used: 5 + 5 do not fit together
        ("older waiting, same namespace: ahead", g("a", 5, created=T0), g("b", 5, created=T1), False),
        ("younger waiting: behind", g("a", 5, created=T2), g("b", 5, created=T1), True),
        (
            "older waiting, another namespace: not this quota nor this queue",
            g("a", 5, created=T0, ns="x"),
            g("b", 5, created=T1),
            True,
        ),
        (
            "older waiting but beyond hard alone: holds nothing",
            g("a", 9, created=T0),
            g("b", 5, created=T1),
            True,
        ),
    ],
)
def test_quota_order(case, other, me, admitted):
    big = {"cpu": F(100)}  # capacity is not the question here
    assert verdict(me, [quota(8, 0)], big, [], [other]).admitted is admitted, case


@pytest.mark.parametrize(
    ("case", "other", "me", "admitted"),
    [
        # --enqueue-order=fcfs: creation time alone, as the Delay Pod Creation design words it
        (
            "older but lower priority: ahead",
            g("a", 6, priority=50, created=T0, order_by="fcfs"),
            g("b", 6, created=T1, order_by="fcfs"),
            False,
        ),
        (
            "younger but higher priority: behind",
            g("a", 6, priority=200, created=T2, order_by="fcfs"),
            g("b", 6, created=T1, order_by="fcfs"),
            True,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_fcfs_order(case, other, me, admitted):
    assert verdict(me, [], ALLOC, [], [other]).admitted is admitted, case


def test_waiting_ahead_is_in_enqueue_order_only():
    groups = [
        g("old", 1, created=T0),
        g("high", 1, priority=200, created=T2),
        g("young", 1, created=T2),
        g("low", 1, priority=10, created=T0),
        g("old", 1, created=T0, ns="x"),  # another namespace's queue
        g("high", 1, priority=200, created=T2, ns="x"),
    ]
    me = g("me", 1, created=T1)
    assert sorted(o.key for o in waiting_ahead(me, groups, [], ALLOC)) == ["ns/high", "ns/old"]
    ordered = sorted([o for o in [*groups, me] if o.namespace == "ns"], key=lambda o: o.order)
    assert [o.key for o in ordered] == ["ns/high", "ns/old", "ns/me", "ns/young", "ns/low"]


# ---- one tenant's waiting group and the others' ----------------------------------------------------

# The reported stall: the cluster has 26 cpu, fillers of the same priority hold 20; tenant a's
# 20-cpu gang fits the allocatable but not the 6 idle, so it waits.
FILLED = {"cpu": F(26)}
FILLERS = [BoundPod(100, {"cpu": F(20)})]
BIG_A = g("big", 20, created=T0, ns="tenant-a")


def test_a_waiting_group_of_one_namespace_does_not_hold_another_namespaces_group():
    assert not verdict(BIG_A, [], FILLED, FILLERS, []).admitted
    small_b = g("small", 1, created=T1, ns="tenant-b")
    v = verdict(small_b, [], FILLED, FILLERS, [BIG_A])
    assert v.admitted, v.reason


def test_a_younger_group_of_the_same_namespace_is_still_held_by_an_older_waiting_one():
    small_a = g("small", 1, created=T1, ns="tenant-a")
    v = verdict(small_a, [], FILLED, FILLERS, [BIG_A])
    assert not v.admitted
    assert v.reason == (
        "cluster capacity insufficient: minResources cpu=1 exceed what is not held by pods and "
        "PodGroups of priority >= 100 and older waiting PodGroups of its namespace (allocatable cpu=26)"
    )
    assert sorted(o.key for o in waiting_ahead(small_a, [BIG_A], [], FILLED)) == ["tenant-a/big"]
    # and once the big one is admitted, it holds in every namespace
    inqueue = g("big", 20, created=T0, ns="tenant-a", phase="Inqueue")
    assert not verdict(g("small", 1, created=T1, ns="tenant-b"), [], FILLED, FILLERS, [inqueue]).admitted


# ---- stranding: the quota plugin charges pods at creation ----------------------------------------


@pytest.mark.parametrize(
    ("case", "used", "charged", "created_members", "consumed", "admitted"),
    [
        # quota cpu=4, minResources cpu=3, minMember 3, three 1-cpu members
        ("none created, 1 used elsewhere", 1, 0, 0, 0, True),
        ("none created, 2 used elsewhere", 2, 0, 0, 0, False),
        ("all created, unbound (issue 11)", 3, 3, 3, 0, True),
        ("all created, one bound", 3, 3, 3, 1, True),
        ("two created, 1 used elsewhere", 3, 2, 2, 0, True),
        ("two created, 2 used elsewhere", 4, 2, 2, 0, False),
        ("all bound", 3, 3, 3, 3, True),
    ],
)
def test_demand_is_counted_once(case, used, charged, created_members, consumed, admitted):
    me = g("gang", 3, min_member=3, charged=charged, created_members=created_members, consumed=consumed)
    assert verdict(me, [quota(4, used)], ALLOC, [], []).admitted is admitted, case


def test_other_holders_created_members_are_not_counted_twice():
    # another Inqueue group, minResources 2, both members created (in used already): 4 - 2 = 2 left
    holder = g("other", 2, phase="Inqueue", min_member=2, charged=2, created_members=2)
    assert verdict(g("me", 2), [quota(4, 2)], ALLOC, [], [holder]).admitted
    uncreated = g("other", 2, phase="Inqueue", min_member=2)
    assert not verdict(g("me", 2), [quota(4, 2)], ALLOC, [], [uncreated]).admitted


def test_capacity_still_counts_created_unbound_members_as_demand():
    # created but unbound members hold no node: the gang still needs its 3 cpus of capacity
    me = g("gang", 3, min_member=3, charged=3, created_members=3)
    assert not verdict(me, [], {"cpu": F(4)}, [BoundPod(100, {"cpu": F(2)})], []).admitted


# ---- rollback reasons ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stuck_since", "now", "timeout", "out"),
    [
        (None, 1000.0, 300.0, False),  # not stuck
        (900.0, 1000.0, 300.0, False),  # stuck for less than the timeout
        (700.0, 1000.0, 300.0, True),
        (0.0, 1000.0, 0.0, False),  # 0 disables the rollback
    ],
)
def test_inqueue_timed_out(stuck_since, now, timeout, out):
    assert inqueue_timed_out(stuck_since, now, timeout) is out


def unschedulable(reason: str, since: str) -> dict:
    return {
        "conditions": [
            {"type": "Unschedulable", "status": "True", "reason": reason, "lastTransitionTime": since}
        ]
    }


ROLLED_BACK_AT = 1767225600.0  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    ("status", "now", "backoff", "out"),
    [
        (None, ROLLED_BACK_AT, 60.0, False),
        (unschedulable(INQUEUE_TIMEOUT, T0), ROLLED_BACK_AT + 30, 60.0, True),
        (unschedulable(INQUEUE_TIMEOUT, T0), ROLLED_BACK_AT + 61, 60.0, False),
        (unschedulable(INQUEUE_TIMEOUT, T0), ROLLED_BACK_AT + 30, 0.0, False),  # no back-off
        (unschedulable(NOT_ENOUGH_RESOURCES, T0), ROLLED_BACK_AT + 30, 60.0, False),
        (unschedulable(INQUEUE_TIMEOUT, "garbage"), ROLLED_BACK_AT + 30, 60.0, False),
    ],
)
def test_backing_off(status, now, backoff, out):
    assert backing_off(status, now, backoff) is out


def test_a_group_backing_off_is_not_enqueued_and_says_why():
    v = verdict(g("me", 1, backing_off=True), [], ALLOC, [], [])
    assert not v.admitted and v.condition_reason == INQUEUE_TIMEOUT


@pytest.mark.parametrize(
    ("case", "verdict_", "want_reason"),
    [
        ("quota went away", EnqueueVerdict(False, "quota q insufficient: ..."), NOT_ENOUGH_RESOURCES),
        (
            "capacity went away",
            EnqueueVerdict(False, "cluster capacity insufficient: ..."),
            NOT_ENOUGH_RESOURCES,
        ),
        (
            "Inqueue timeout",
            EnqueueVerdict(False, "Inqueue for more than 300s ...", INQUEUE_TIMEOUT),
            INQUEUE_TIMEOUT,
        ),
    ],
)
def test_rollback_reasons(case, verdict_, want_reason):
    members = Members(active=3)  # nothing bound
    new_phase = next_phase("Inqueue", 3, members, verdict_)
    assert new_phase == "Pending", case
    conditions = desired_conditions(new_phase, 3, members, verdict_)
    unsched = next(c for c in conditions if c["type"] == "Unschedulable")
    assert (unsched["status"], unsched["reason"], unsched["message"]) == (
        "True",
        want_reason,
        verdict_.reason,
    )
    event = phase_event({"phase": "Inqueue"}, {"phase": new_phase, "conditions": conditions})
    assert event is not None and event.type == "Warning" and event.reason == "Pending"
    assert verdict_.reason in event.note
