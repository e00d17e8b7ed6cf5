"""Gang preemption for PodGroups: scenarios.

A group's own decision is read through `decide_for_group`, the controller's entry point
(outcomes.group_outcome also checks simulate's run agrees); what the whole run does around it
(other preemptors, the order) through the simulate JSON.
"""

from __future__ import annotations

import pytest

from priogate.preemption.engine import PENDING_GROUP
from priogate.preemption.outcome import Outcome
from priogate.preemption.single import NOT_ELIGIBLE_NEVER
from tests.unit.preemption.builders import node, pclass, pdb, pod, podgroup, run, unresolved
from tests.unit.preemption.outcomes import group_outcome

GANG = "podgroup:default/gang"


def gang(
    size: int, cpu: str = "2", *, min_member: int | None = None, klass: str = "high", **group
) -> list[dict]:
    objects = [
        pclass("high", 100),
        podgroup("gang", size if min_member is None else min_member, klass=klass, **group),
    ]
    objects += [pod(f"g{i}", None, cpu, klass=klass, group="gang", created=i) for i in range(size)]
    return objects


def decision(objects: list[dict], **options) -> Outcome:
    return group_outcome(objects, "default/gang", **options)


def victims(outcome: Outcome) -> list[str]:
    return [v.key for v in outcome.victims]


def test_members_land_on_several_nodes_with_the_lowest_victims():
    objects = [
        node("n1"),
        node("n2"),
        node("n3"),
        pod("a1", 1, "2", on="n1"),
        pod("a2", 5, "2", on="n1"),
        pod("b1", 2, "2", on="n2"),
        pod("b2", 2, "2", on="n2"),
        pod("c1", 7, "4", on="n3"),
        *gang(3),
    ]
    d = decision(objects)
    assert d.node is None
    assert sorted(victims(d)) == ["default/a1", "default/b1", "default/b2"]
    assert sorted(d.placements) == ["default/g0", "default/g1", "default/g2"]
    assert sorted(d.placements.values()) == ["n1", "n2", "n2"]


def test_surplus_members_of_a_group_go_before_the_whole_group():
    objects = [
        node("n1"),
        node("n2"),
        podgroup("job", 2),
        pod("j1", 3, "2", on="n1", group="job", start=1),
        pod("j2", 3, "2", on="n1", group="job", start=2),
        pod("j3", 3, "2", on="n2", group="job", start=3),
        pod("s", 4, "2", on="n2"),
        *gang(1),
    ]
    d = decision(objects)
    # one surplus member goes (the least important, j3) and the job keeps minMember 2
    assert victims(d) == ["default/j3"]
    assert "surplus member" in d.reason


def test_a_group_that_would_drop_below_min_member_goes_whole():
    objects = [
        node("n1"),
        node("n2"),
        podgroup("job", 2),
        pod("j1", 3, "4", on="n1", group="job"),
        pod("j2", 3, "4", on="n2", group="job"),
        node("n3", cpu="2"),
        pod("j3", 3, "1", on="n3", group="job"),
        *gang(2, cpu="4"),
    ]
    d = decision(objects)
    # Both big members must go (j3's node is too small for the gang anyway); that would
    # leave j3 alone, below minMember 2: the group goes whole.
    assert sorted(victims(d)) == ["default/j1", "default/j2", "default/j3"]


def test_a_group_without_surplus_goes_whole_or_not_at_all():
    objects = [
        node("n1"),
        node("n2"),
        podgroup("job", 2),
        pod("j1", 3, "4", on="n1", group="job"),
        pod("j2", 3, "4", on="n2", group="job"),
        *gang(1, cpu="4"),
    ]
    d = decision(objects)
    assert sorted(victims(d)) == ["default/j1", "default/j2"]
    assert "1 whole PodGroup(s)" in d.reason


def test_a_cheaper_single_pod_is_taken_before_a_group_of_equal_priority():
    objects = [
        node("n1"),
        node("n2"),
        podgroup("job", 2),
        pod("j1", 3, "4", on="n1", group="job", start=0),
        pod("j2", 3, "4", on="n2", group="job", start=0),
        node("n3"),
        pod("single", 3, "4", on="n3", start=50),
        *gang(1, cpu="4"),
    ]
    assert victims(decision(objects)) == ["default/single"]


def test_nothing_is_taken_unless_every_member_can_be_placed():
    objects = [
        node("n1"),
        node("n2"),
        pod("a", 1, "4", on="n1"),
        pod("b", 1, "4", on="n2"),
        *gang(3, cpu="4"),
    ]
    d = decision(objects)
    assert d.status == "unresolved"
    assert "cannot place all 3 needed member(s)" in d.reason


def test_only_lower_priority_victims():
    objects = [
        node("n1"),
        node("n2"),
        pod("peer", 100, "4", on="n1"),
        pod("low", 1, "4", on="n2"),
        *gang(2, "4"),
    ]
    assert decision(objects).status == "unresolved"


def test_running_members_count_towards_min_member():
    objects = [
        node("n1"),
        node("n2"),
        pod("low", 1, "4", on="n2"),
        *gang(3, cpu="4", min_member=2),
    ]
    objects.append(pod("running", None, "4", klass="high", group="gang", on="n1"))
    d = decision(objects)
    # minMember 2 with one member placed: one pending member is needed, not three
    assert d.placements == {"default/g0": "n2"}
    assert victims(d) == ["default/low"]


def test_a_complete_gang_lets_its_other_members_preempt_one_by_one():
    objects = [node("n1"), node("n2"), pod("low", 1, "4", on="n2"), *gang(1, cpu="4", min_member=1)]
    objects.append(pod("running", None, "4", klass="high", group="gang", on="n1"))
    result = run(objects)
    assert [d["preemptor"] for d in result["decisions"]] == ["default/g0"]


def test_too_few_pending_members():
    objects = [node("n1"), *gang(2, min_member=3)]
    assert "only 2 are pending" in unresolved(run(objects))[GANG]


def test_a_gang_that_fits_gets_no_decision():
    result = run([node("n1", cpu="8"), *gang(3)])
    assert result["decisions"] == [] and result["unresolved"] == []


def test_a_pending_group_waits_for_its_queue():
    objects = [node("n1"), pod("low", 1, "4", on="n1"), *gang(1, cpu="4", phase="Pending")]
    assert unresolved(run(objects)) == {GANG: PENDING_GROUP}


def test_a_never_class_is_not_eligible():
    objects = [node("n1"), pod("low", 1, "4", on="n1"), pclass("calm", 100, policy="Never")]
    objects += [podgroup("gang", 1, klass="calm"), pod("g0", None, "4", klass="calm", group="gang")]
    assert unresolved(run(objects)) == {GANG: NOT_ELIGIBLE_NEVER}


def test_a_group_with_a_protected_member_is_never_taken():
    objects = [
        node("n1"),
        podgroup("job", 1),
        pod("j1", 1, "4", on="n1", group="job", labels={"priogate.io/allow-preemption": "false"}),
        node("n2"),
        podgroup("other", 1),
        pod("o1", 1, "2", on="n2", group="other"),
        pod("o2", 1, "2", on="n2", group="other"),
        *gang(1, cpu="4"),
    ]
    d = decision(objects)
    assert sorted(victims(d)) == ["default/o1", "default/o2"]


def test_pdbs_are_best_effort_for_gangs():
    objects = [
        node("n1"),
        node("n2"),
        pod("guarded", 1, "4", on="n1", labels={"app": "x"}),
        pod("free", 5, "4", on="n2", labels={"app": "y"}),
        pdb("x", {"app": "x"}, allowed=0),
        *gang(1, cpu="4"),
    ]
    assert victims(decision(objects)) == ["default/free"]
    objects.append(pod("g1", None, "4", klass="high", group="gang", created=1))
    group = next(o for o in objects if o["kind"] == "PodGroup")
    group["spec"]["minMember"] = 2  # now both nodes are needed: the PDB gives way
    d = decision(objects)
    assert sorted(victims(d)) == ["default/free", "default/guarded"]
    assert "1 PDB violation(s)" in d.reason


def test_members_of_different_shapes():
    objects = [
        node("n1", cpu="8"),
        node("n2", cpu="4"),
        pod("a", 1, "6", on="n1"),
        pod("b", 2, "2", on="n1"),
        pod("c", 1, "4", on="n2"),
        pclass("high", 100),
        podgroup("gang", 2, klass="high"),
        pod("driver", None, "2", klass="high", group="gang", created=0),
        pod("worker", None, "6", klass="high", group="gang", created=1),
    ]
    d = decision(objects)
    assert d.placements == {"default/driver": "n2", "default/worker": "n1"}
    assert sorted(victims(d)) == ["default/a", "default/c"]


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_opted_out_pods_in_gang_preemption(mode):
    opted = {"priogate.io/allow-preemption": "false"}
    objects = [node("n1"), pod("o", 1, "4", on="n1", labels=opted), *gang(1, cpu="4")]
    d = decision(objects, opt_out_mode=mode)
    if mode == "hard":
        assert d.status == "unresolved"
    else:
        assert victims(d) == ["default/o"]
        assert "opted-out pods included" in d.reason


def test_explain_marks_hosting_nodes():
    objects = [
        node("n1"),
        node("n2"),
        pod("a", 1, "4", on="n1"),
        pod("b", 9, "4", on="n2"),
        *gang(1, cpu="4"),
    ]
    nodes = decision(objects, explain=True).nodes
    assert nodes["n1"].startswith("chosen: hosts 1 member(s), 1 victim(s) here")
    assert nodes["n2"].startswith("not used")


def test_lower_priority_nominations_on_member_nodes_are_cleared():
    objects = [
        node("b", cpu="8"),
        pod("vb", 1, "8", on="b"),
        *gang(1, cpu="4"),
        pod("nominee", 50, "4", nominated="b", created=1),
        pod("later", 40, "4", created=2),
    ]
    assert decision(objects).placements == {"default/g0": "b"}
    result = run(objects)
    # nominee no longer holds b's remaining 4 cores against lower priorities: "later" fits
    # there too (the scheduler sorts out who binds), so neither needs a decision. Had the
    # nomination stayed, "later" would find b held and no victim to take.
    assert [d["preemptor"] for d in result["decisions"]] == [GANG]
    assert result["unresolved"] == []
