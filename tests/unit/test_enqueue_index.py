"""The indexed enqueue verdicts (priogate.enqueue_index) equal the one-group-at-a-time walk
(tests/unit/enqueue_reference.py) on random clusters: the same verdict, reason and condition,
or the same error for a malformed quota."""

from __future__ import annotations

import dataclasses
import random
from fractions import Fraction
from functools import partial
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.enqueue import BoundPod, GroupDemand
from priogate.enqueue_index import Verdicts
from priogate.phase import EnqueueVerdict
from priogate.running_sums import HeldByPriority
from tests.unit import enqueue_reference

NAMESPACES = ("a", "b", "c")
CLASSES = ("", "gold", "silver")
PHASES = ("", "Pending", "Pending", "Inqueue", "Running", "Unknown")
RESOURCES = ("cpu", "memory", "example.com/gpu")
# Whole, milli and, off the nano grid, thirds: the index sums nano-units as ints, else Fractions.
AMOUNTS = st.sampled_from(
    [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(2), Fraction(3), Fraction(1, 3)]
)
TIMES = st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", ""])


def amounts(names: tuple[str, ...] = RESOURCES) -> st.SearchStrategy[dict[str, Fraction]]:
    return st.dictionaries(st.sampled_from(names), AMOUNTS, max_size=len(names))


@st.composite
def group(draw: st.DrawFn, namespace: str, name: str) -> GroupDemand:
    return GroupDemand(
        key=f"{namespace}/{name}",
        namespace=namespace,
        priority_class=draw(st.sampled_from(CLASSES)),
        priority=draw(st.sampled_from([0, 10, 100])),
        preempts=draw(st.booleans()),
        phase=draw(st.sampled_from(PHASES)),
        min_member=draw(st.integers(0, 3)),
        min_resources=draw(amounts()),
        consumed=draw(amounts()),
        charged=draw(amounts()),
        created_members=draw(st.integers(0, 3)),
        created_at=draw(TIMES),
        backing_off=draw(st.integers(0, 5)) == 0,
    )


SCOPES: list[dict[str, Any]] = [
    {},
    {
        "scopeSelector": {
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["gold"]}]
        }
    },
    {
        "scopeSelector": {
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": ["gold"]}]
        }
    },
    {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]}},
    {"scopes": ["NotTerminating"]},
    {"scopes": ["BestEffort"]},  # never a group's
]
QUOTA_NAMES = ("cpu", "requests.cpu", "memory", "requests.example.com/gpu", "pods", "count/pods")
QUANTITIES = st.sampled_from(["0", "500m", "1", "2", "3", "5", "8"])


@st.composite
def quota(draw: st.DrawFn, name: str) -> dict[str, Any]:
    hard = draw(st.dictionaries(st.sampled_from(QUOTA_NAMES), QUANTITIES, min_size=1, max_size=3))
    used = draw(st.dictionaries(st.sampled_from(QUOTA_NAMES), QUANTITIES, max_size=3))
    if draw(st.integers(0, 15)) == 0:  # malformed: the verdict is the quota functions' error
        (hard if draw(st.booleans()) else used)["cpu"] = "lots"
    spec = {"hard": hard, **draw(st.sampled_from(SCOPES))}
    return {"metadata": {"name": name}, "spec": spec, "status": {"used": used}}


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[GroupDemand], dict[str, list[dict]], list[BoundPod], dict]:
    namespaces = NAMESPACES[: draw(st.integers(1, 3))]
    groups = [
        draw(group(draw(st.sampled_from(namespaces)), f"g{i}")) for i in range(draw(st.integers(0, 12)))
    ]
    quotas = {ns: [draw(quota(f"q{i}")) for i in range(draw(st.integers(0, 3)))] for ns in namespaces}
    bound = draw(st.lists(st.builds(BoundPod, st.sampled_from([0, 10, 100, 1000]), amounts()), max_size=10))
    return groups, quotas, bound, draw(amounts())


def outcome(decide: Any) -> EnqueueVerdict | str:
    try:
        return decide()
    except ValueError as e:
        return f"ValueError: {e}"


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster(), st.data())
def test_the_index_decides_as_the_walk(world, data):
    groups, quotas, bound, allocatable = world
    held = HeldByPriority.of_pods(bound)
    verdicts = Verdicts(by_namespace(groups), held, allocatable, lambda ns: quotas.get(ns, []))
    # Every group of the view; one not in it; a few whose entry in the view is not what is asked
    # about (the reconciler decides on a demand computed afresh), so the index must take back
    # out exactly the part of that entry it counted.
    asked = [*groups, data.draw(group("a", "new"))]
    for seen in groups[:3]:
        asked.append(
            dataclasses.replace(
                seen,
                phase=data.draw(st.sampled_from(PHASES)),
                priority=data.draw(st.sampled_from([0, 10, 100])),
                created_at=data.draw(TIMES),
                min_resources=data.draw(amounts()),
            )
        )
    agree(verdicts, asked, groups, quotas, bound, allocatable)
    # The next views: in one namespace a few groups changed, gone or new (a new list), the other
    # namespaces' lists the same: their parts are reused, the changed one's moved by what changed.
    namespaces = by_namespace(groups)
    for step in range(3):
        namespace = data.draw(st.sampled_from(NAMESPACES))
        part = list(namespaces.get(namespace, []))
        for _ in range(data.draw(st.integers(1, 3))):
            action = data.draw(st.sampled_from(["replace", "add", "remove"]))
            if action == "add" or not part:
                part.insert(
                    data.draw(st.integers(0, len(part))), data.draw(group(namespace, f"n{step}{len(part)}"))
                )
            elif action == "replace":
                at = data.draw(st.integers(0, len(part) - 1))
                part[at] = dataclasses.replace(
                    part[at],
                    phase=data.draw(st.sampled_from(PHASES)),
                    backing_off=data.draw(st.booleans()),
                )
            else:
                del part[data.draw(st.integers(0, len(part) - 1))]
        namespaces[namespace] = part
        after = [g for listed in namespaces.values() for g in listed]
        verdicts = Verdicts(namespaces, held, allocatable, lambda ns: quotas.get(ns, []), previous=verdicts)
        agree(verdicts, [*after, *asked], after, quotas, bound, allocatable)


def by_namespace(groups: list[GroupDemand]) -> dict[str, list[GroupDemand]]:
    out: dict[str, list[GroupDemand]] = {}
    for g in groups:
        out.setdefault(g.namespace, []).append(g)
    return out


def agree(
    verdicts: Verdicts, asked: list[GroupDemand], groups: list[GroupDemand], quotas, bound, allocatable
):
    for me in asked:
        others = [o for o in groups if o.key != me.key]
        ns_quotas = quotas.get(me.namespace, [])
        expected = outcome(partial(enqueue_reference.verdict, me, ns_quotas, allocatable, bound, others))
        assert outcome(partial(verdicts.verdict, me)) == expected, me.key


def test_a_few_thousand_groups_agree_too():
    """One larger seeded cluster: long runs of equal priorities and times, many classes' sums."""
    rng = random.Random(7)
    groups = []
    for i in range(600):
        ns = rng.choice(NAMESPACES)
        groups.append(
            GroupDemand(
                key=f"{ns}/g{i}",
                namespace=ns,
                priority_class=rng.choice(CLASSES),
                priority=rng.choice([0, 10, 100]),
                preempts=rng.random() < 0.8,
                phase=rng.choice(PHASES),
                min_member=rng.randint(0, 3),
                min_resources={"cpu": Fraction(rng.randint(1, 4), 2), "memory": Fraction(rng.randint(0, 3))},
                consumed={"cpu": Fraction(rng.randint(0, 2))},
                charged={"cpu": Fraction(rng.randint(0, 2))},
                created_members=rng.randint(0, 3),
                created_at=f"2026-01-01T00:00:{rng.randint(0, 20):02d}Z",
                backing_off=rng.random() < 0.1,
            )
        )
    quotas = {
        ns: [
            {
                "metadata": {"name": "q"},
                "spec": {"hard": {"cpu": "150", "pods": "300"}},
                "status": {"used": {"cpu": "20"}},
            },
            {
                "metadata": {"name": "gold"},
                "spec": {"hard": {"requests.cpu": "60"}, **SCOPES[1]},
                "status": {},
            },
        ]
        for ns in NAMESPACES
    }
    bound = [BoundPod(rng.choice([0, 10, 100]), {"cpu": Fraction(rng.randint(0, 4), 4)}) for _ in range(2000)]
    allocatable = {"cpu": Fraction(900), "memory": Fraction(500)}
    verdicts = Verdicts(
        by_namespace(groups), HeldByPriority.of_pods(bound), allocatable, lambda ns: quotas[ns]
    )
    admitted = 0
    for me in groups:
        others = [o for o in groups if o.key != me.key]
        expected = enqueue_reference.verdict(me, quotas[me.namespace], allocatable, bound, others)
        assert verdicts.verdict(me) == expected, me.key
        admitted += expected.admitted
    assert 0 < admitted < len(groups)  # both answers are exercised


def _pending(key: str, cpu: int, created: str, priority_class: str = "") -> GroupDemand:
    return GroupDemand(
        key=key,
        namespace=key.split("/")[0],
        priority_class=priority_class,
        priority=0,
        preempts=True,
        phase="Pending",
        min_member=0,
        min_resources={"cpu": Fraction(cpu)},
        consumed={},
        created_at=created,
    )


def test_the_groups_own_older_entry_is_never_ahead_of_it():
    """The view may hold an older state of the group asked about (here: the same group, created
    earlier): it is not one of its others, for quota or for capacity."""
    seen = _pending("a/me", 3, "2026-01-01T00:00:00Z")
    asked = _pending("a/me", 3, "2026-01-01T00:00:05Z")
    quotas = [{"metadata": {"name": "q"}, "spec": {"hard": {"cpu": "4"}}, "status": {"used": {}}}]
    verdicts = Verdicts({"a": [seen]}, HeldByPriority.of_pods([]), {"cpu": Fraction(4)}, lambda _: quotas)
    assert verdicts.verdict(asked) == enqueue_reference.verdict(asked, quotas, {"cpu": Fraction(4)}, [], [])
    assert verdicts.verdict(asked).admitted


def test_only_another_groups_malformed_quota_test_is_the_verdicts_error():
    # q-bad applies to every class and cannot be read; q-gold, first by name, refuses the gold
    # group before q-bad is read. The group's own older entry (no class) would read q-bad.
    quotas = [
        {"metadata": {"name": "q-bad"}, "spec": {"hard": {"cpu": "lots"}}, "status": {}},
        {"metadata": {"name": "a-gold"}, "spec": {"hard": {"cpu": "1"}, **SCOPES[1]}, "status": {}},
    ]
    seen = _pending("a/me", 3, "2026-01-01T00:00:00Z")
    asked = _pending("a/me", 3, "2026-01-01T00:00:05Z", "gold")
    verdicts = Verdicts({"a": [seen]}, HeldByPriority.of_pods([]), {"cpu": Fraction(4)}, lambda _: quotas)
    expected = enqueue_reference.verdict(asked, quotas, {"cpu": Fraction(4)}, [], [])
    assert "quota a-gold insufficient" in expected.reason
    assert verdicts.verdict(asked) == expected
    other = dataclasses.replace(seen, key="a/other")
    verdicts = Verdicts({"a": [other]}, HeldByPriority.of_pods([]), {"cpu": Fraction(4)}, lambda _: quotas)
    assert outcome(lambda: verdicts.verdict(asked)) == outcome(
        lambda: enqueue_reference.verdict(asked, quotas, {"cpu": Fraction(4)}, [], [other])
    )
    assert "q-bad" in str(outcome(lambda: verdicts.verdict(asked)))


def test_a_view_moved_by_what_changed_decides_as_a_fresh_one():
    """Each step changes one namespace's list (a new list): its part is moved by the groups that
    differ, the other namespace's part is the last view's."""
    quotas: dict[str, list[dict]] = {"a": [], "b": []}
    allocatable = {"cpu": Fraction(4)}
    older = dataclasses.replace(_pending("a/older", 3, "2026-01-01T00:00:00Z"), phase="Inqueue")
    younger = _pending("b/younger", 2, "2026-01-01T00:00:05Z")
    namespaces = {"a": [older], "b": [younger]}
    held = HeldByPriority.of_pods([])
    verdicts = Verdicts(namespaces, held, allocatable, quotas.__getitem__)
    assert not verdicts.verdict(younger).admitted  # the Inqueue group of a holds 3 of the 4

    steps = [
        ([dataclasses.replace(older, phase="Pending")], True),  # waits in a's queue: holds nothing in b
        ([], True),  # gone
        ([dataclasses.replace(_pending("a/again", 3, "2026-01-01T00:00:01Z"), phase="Running")], False),
        ([_pending("a/again", 3, "2026-01-01T00:00:01Z")], True),
    ]
    tiny = _pending("a/tiny", 0, "2026-01-01T00:00:00Z")  # waiting, eligible, needs nothing
    for step, admitted in steps:
        namespaces = {"a": [tiny, *step], "b": namespaces["b"]}
        verdicts = Verdicts(namespaces, held, allocatable, quotas.__getitem__, previous=verdicts)
        expected = enqueue_reference.verdict(younger, [], allocatable, [], namespaces["a"])
        assert verdicts.verdict(younger) == expected, step
        assert expected.admitted is admitted, step
