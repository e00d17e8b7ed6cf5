"""One table row per node-order criterion (kube-scheduler's pickOneNodeForPreemption), and
per-node victim selection (the reprieve loop). Node names are chosen so that the name
tie-break would pick the other node: only the criterion under test can decide."""

from __future__ import annotations

import pytest

from tests.builders import node, pdb, pod
from tests.unit.preemption.outcomes import decided, outcomes

HIGH = 100


def two_nodes(on_a: list[dict], on_b: list[dict], want_cpu: str = "2", **preemptor) -> list[dict]:
    return [
        node("a", cpu="4"),
        node("b", cpu="4"),
        *on_a,
        *on_b,
        pod("p", priority=HIGH, cpu=want_cpu, **preemptor),
    ]


CASES = {
    # 1. fewest PDB violations beats a lower victim priority
    "fewest PDB violations": (
        [
            *two_nodes(
                [pod("a1", priority=1, cpu="4", node="a", labels={"app": "guarded"})],
                [pod("b1", priority=5, cpu="4", node="b", labels={"app": "free"})],
            ),
            pdb("guard", match_labels={"app": "guarded"}, allowed=0),
        ],
        ("b", ["default/b1"]),
    ),
    # 2. lowest highest-victim priority beats fewer victims
    "lowest highest-victim priority": (
        two_nodes(
            [pod("a1", priority=7, cpu="4", node="a")],
            [pod("b1", priority=2, cpu="2", node="b"), pod("b2", priority=3, cpu="2", node="b")],
            want_cpu="4",
        ),
        ("b", ["default/b2", "default/b1"]),
    ),
    # 3. same top priority: smallest sum of priorities
    "smallest sum of priorities": (
        two_nodes(
            [pod("a1", priority=5, cpu="2", node="a"), pod("a2", priority=4, cpu="2", node="a")],
            [pod("b1", priority=5, cpu="2", node="b"), pod("b2", priority=1, cpu="2", node="b")],
            want_cpu="4",
        ),
        ("b", ["default/b1", "default/b2"]),
    ),
    # 4. same top priority and sum: fewest victims (a has 3 victims of priority 0 summing 0,
    # b has one of priority 0: sums differ by the 2^31 shift, so the count shows in the sum;
    # this row checks that more victims of equal priority lose)
    "fewest victims": (
        two_nodes(
            [
                pod("a1", priority=0, cpu="1", node="a"),
                pod("a2", priority=0, cpu="1", node="a"),
                pod("a3", priority=0, cpu="2", node="a"),
            ],
            [pod("b1", priority=0, cpu="3", node="b"), pod("b2", priority=9, cpu="1", node="b")],
            want_cpu="3",
        ),
        ("b", ["default/b1"]),
    ),
    # 5. everything equal: the node whose top-priority victims started latest
    "latest start": (
        two_nodes(
            [pod("a1", priority=3, cpu="4", node="a", started=100)],
            [pod("b1", priority=3, cpu="4", node="b", started=200)],
        ),
        ("b", ["default/b1"]),
    ),
    # 5b. a victim that has not started counts as starting now: the latest of all
    "not started is latest": (
        two_nodes(
            [pod("a1", priority=3, cpu="4", node="a", started=100)],
            [pod("b1", priority=3, cpu="4", node="b", started=None)],
        ),
        ("b", ["default/b1"]),
    ),
    # 5c. the earliest start among the top-priority victims is what counts
    "earliest of the top victims": (
        two_nodes(
            [
                pod("a1", priority=3, cpu="2", node="a", started=50),
                pod("a2", priority=3, cpu="2", node="a", started=500),
            ],
            [
                pod("b1", priority=3, cpu="2", node="b", started=60),
                pod("b2", priority=3, cpu="2", node="b", started=70),
            ],
            want_cpu="4",
        ),
        ("b", ["default/b1", "default/b2"]),
    ),
    # 6. a full tie goes to the first node by name
    "node name": (
        two_nodes(
            [pod("a1", priority=3, cpu="4", node="a", started=100)],
            [pod("b1", priority=3, cpu="4", node="b", started=100)],
        ),
        ("a", ["default/a1"]),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("explain", [False, True])
def test_node_order_criterion(name, explain):
    objects, (want_node, want_victims) = CASES[name]
    result = outcomes(objects, explain=explain)
    assert decided(result) == {"default/p": (want_node, want_victims)}


def test_explain_names_the_deciding_criterion():
    objects, _ = CASES["latest start"]
    nodes = next(o for o in outcomes(objects, explain=True) if o.status == "preempt").nodes
    assert nodes["b"] == "chosen"
    assert nodes["a"].startswith("lost to b on latest start of the highest-priority victims")


@pytest.mark.parametrize(
    ("pods", "want_cpu", "victims"),
    [
        # the pod-preemption design's example: only the priority-2 pod goes although lower ones survive
        (
            [("p0", 0, "3"), ("p1", 1, "1"), ("p2", 2, "5"), ("p3", 3, "1")],
            "5",
            ["default/p2"],
        ),
        # equal priority: the older pod is more important and is spared first
        ([("young", 1, "2", 200), ("old", 1, "2", 100)], "2", ["default/young"]),
        # reprieve protects the most important first: two low victims rather than one high
        ([("a", 5, "4"), ("b", 3, "2"), ("c", 2, "2")], "4", ["default/b", "default/c"]),
        # equal priority is never a victim
        ([("peer", HIGH, "8"), ("low", 1, "2")], "2", ["default/low"]),
    ],
)
def test_victims_on_one_node(pods, want_cpu, victims):
    full = sum(int(spec[2]) for spec in pods)  # a node exactly full of these pods
    objects = [node("n", cpu=str(full))]
    for spec in pods:
        name, priority, cpu, *start = spec
        objects.append(pod(name, priority=priority, cpu=cpu, node="n", started=start[0] if start else 0))
    objects.append(pod("p", priority=HIGH, cpu=want_cpu))
    assert decided(outcomes(objects)) == {"default/p": ("n", victims)}


def test_pdb_violating_pods_are_reprieved_first_but_taken_when_nothing_else_works():
    objects = [
        node("n", cpu="4"),
        pod("guarded", priority=1, cpu="2", node="n", labels={"app": "x"}),
        pod("free", priority=2, cpu="2", node="n", labels={"app": "y"}),
        pdb("x", match_labels={"app": "x"}, allowed=0),
        pod("p", priority=HIGH, cpu="2"),
    ]
    assert decided(outcomes(objects)) == {"default/p": ("n", ["default/free"])}
    objects[-1] = pod("p", priority=HIGH, cpu="4")
    assert decided(outcomes(objects)) == {"default/p": ("n", ["default/free", "default/guarded"])}


@pytest.mark.parametrize(
    ("pdb_args", "want"),
    [
        # The allowance is used up in importance order: g2 (more important) takes the one
        # disruption allowed, so g1 is the violating pod, reprieved first; g2 goes.
        ({"allowed": 1}, ["default/g2"]),
        ({"allowed": 0}, ["default/g1"]),  # both violate: importance order among them, g2 stays
        # g1 is already counted by the apiserver: g2 alone violates, is reprieved first
        ({"allowed": 0, "disrupted": ("g1",)}, ["default/g1"]),
        ({"allowed": 0, "namespace": "other"}, ["default/g1"]),  # another namespace's PDB does not count
    ],
)
def test_pdb_accounting(pdb_args, want):
    objects = [
        node("n", cpu="4"),
        pod("g1", priority=1, cpu="2", node="n", labels={"app": "x"}),
        pod("g2", priority=2, cpu="2", node="n", labels={"app": "x"}),
        pdb("x", match_labels={"app": "x"}, **pdb_args),
        pod("p", priority=HIGH, cpu="2"),
    ]
    assert decided(outcomes(objects)) == {"default/p": ("n", want)}


def test_pdb_violation_makes_a_node_lose_even_with_a_lower_victim():
    objects = [
        node("a", cpu="2"),
        node("b", cpu="2"),
        pod("a1", priority=1, cpu="2", node="a", labels={"app": "x"}),
        pod("b1", priority=8, cpu="2", node="b", labels={"app": "y"}),
        pdb("x", match_labels={"app": "x"}, allowed=0),
        pod("p", priority=HIGH, cpu="2"),
    ]
    assert decided(outcomes(objects)) == {"default/p": ("b", ["default/b1"])}
