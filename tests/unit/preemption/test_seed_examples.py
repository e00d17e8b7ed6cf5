"""The examples 1 to 4 of Kubernetes' pod-preemption design (community repo,
contributors/design-proposals/scheduling/pod-preemption.md), as successive snapshots.

Node capacity 10 units (cpu cores here). A and B run with priority 100 and 5 units each;
C (priority 1000) needs 10 units, D (priority 50) needs 2. The engine decides what the
controller would do at each moment the design describes; the scheduler's own binding of
pods that fit happens between snapshots.
"""

from __future__ import annotations

from priogate.preemption.single import NOT_ELIGIBLE_TERMINATING
from tests.builders import node, pod
from tests.unit.preemption.outcomes import decided, outcomes, unresolved


def a_and_b(*, terminating: bool = False, gone: tuple[str, ...] = ()) -> list[dict]:
    pods = [
        pod(
            "A", priority=100, cpu="5", node="node-1", started=0, deleting=terminating, preempted=terminating
        ),
        pod(
            "B", priority=100, cpu="5", node="node-1", started=10, deleting=terminating, preempted=terminating
        ),
    ]
    return [p for p in pods if p["metadata"]["name"] not in gone]


def c(**kwargs) -> dict:
    return pod("C", priority=1000, cpu="10", created=1, **kwargs)


def d(**kwargs) -> dict:
    return pod("D", priority=50, cpu="2", created=2, **kwargs)


def test_example_1():
    node1 = node("node-1", cpu="10")
    # C preempts both A and B; D can preempt nothing and, once C is placed, does not fit.
    first = outcomes([node1, *a_and_b(), c(), d()])
    assert decided(first) == {"default/C": ("node-1", ["default/A", "default/B"])}
    assert list(unresolved(first)) == ["default/D"]
    # B has gone, A is still terminating: C waits (no more preemption), D does not fit,
    # because C's nomination holds node-1 against lower priorities.
    waiting = outcomes([node1, *a_and_b(terminating=True, gone=("B",)), c(nominated="node-1"), d()])
    assert decided(waiting) == {}
    assert unresolved(waiting)["default/C"] == NOT_ELIGIBLE_TERMINATING
    assert "default/D" in unresolved(waiting)
    # A has gone too: C fits (the scheduler binds it); D still does not fit and cannot preempt.
    done = outcomes([node1, c(nominated="node-1"), d()])
    assert decided(done) == {}
    assert list(unresolved(done)) == ["default/D"]


def test_example_2():
    nodes = [node("node-1", cpu="10"), node("node-2", cpu="10")]
    e = pod("E", priority=2000, cpu="10", node="node-2")
    first = outcomes([*nodes, *a_and_b(), e, c(), d()])
    assert decided(first) == {"default/C": ("node-1", ["default/A", "default/B"])}
    # E terminates while A and B are still going: C now fits on node-2 (no decision; the
    # scheduler places it there, ignoring its nomination).
    e_gone = outcomes([*nodes, *a_and_b(terminating=True), c(nominated="node-1"), d()])
    assert "default/C" not in decided(e_gone) and "default/C" not in unresolved(e_gone)
    # C is bound to node-2: D cannot preempt A or B (higher priority) and does not fit.
    c_bound = outcomes(
        [*nodes, *a_and_b(terminating=True), pod("C", priority=1000, cpu="10", node="node-2"), d()]
    )
    assert decided(c_bound) == {}
    assert list(unresolved(c_bound)) == ["default/D"]
    # B terminates: D fits on node-1 without preempting anything. (It may look as if B was
    # preempted for D; D was never nominated.)
    b_gone = outcomes(
        [
            *nodes,
            *a_and_b(terminating=True, gone=("B",)),
            pod("C", priority=1000, cpu="10", node="node-2"),
            d(),
        ]
    )
    assert decided(b_gone) == {} and unresolved(b_gone) == {}


def test_example_3():
    nodes = [node("node-1", cpu="10"), node("node-2", cpu="10")]
    e = pod("E", priority=2000, cpu="8", node="node-2")
    result = outcomes([*nodes, *a_and_b(), e, c(), d()])
    # C preempts on node-1; D fits in node-2's two free units: no decision for D.
    assert decided(result) == {"default/C": ("node-1", ["default/A", "default/B"])}
    assert unresolved(result) == {}


def test_example_4():
    node1 = node("node-1", cpu="10")
    f = pod("F", priority=2000, cpu="10", created=3)
    result = outcomes([node1, *a_and_b(terminating=True), c(nominated="node-1"), d(), f])
    # F takes node-1: A and B are already leaving, so no new victims; C's nomination (lower
    # priority) is cleared, and C, now holding nothing, cannot preempt F.
    assert decided(result) == {"default/F": ("node-1", [])}
    assert "no new victims" in next(o for o in result if o.status == "preempt").reason
    assert list(unresolved(result)) == ["default/C", "default/D"]
    assert unresolved(result)["default/C"] != NOT_ELIGIBLE_TERMINATING
