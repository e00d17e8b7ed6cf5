"""Gang preemption for PodGroups: scenarios.

A group's own decision is read through `decide_for_group`, the controller's entry point
(outcomes.group_outcome also checks simulate's run agrees); what the whole run does around it
(other preemptors, the order) through the simulate JSON.
"""

from __future__ import annotations

import pytest

from priogate.preemption.engine import PENDING_GROUP, gang_priority
from priogate.preemption.outcome import Outcome
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.single import NOT_ELIGIBLE_NEVER
from tests.builders import node, pdb, pod, podgroup, priority_class
from tests.unit.preemption.outcomes import decided, group_outcome, outcomes, unresolved

GANG = "podgroup:default/gang"


def gang(
    size: int, cpu: str = "2", *, min_member: int | None = None, klass: str = "high", phase: str = "Inqueue"
) -> list[dict]:
    objects = [
        priority_class("high", value=100),
        podgroup(
            "gang", min_member=size if min_member is None else min_member, priority_class=klass, phase=phase
        ),
    ]
    objects += [pod(f"g{i}", cpu=cpu, priority_class=klass, group="gang", created=i) for i in range(size)]
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
        pod("a1", priority=1, cpu="2", node="n1"),
        pod("a2", priority=5, cpu="2", node="n1"),
        pod("b1", priority=2, cpu="2", node="n2"),
        pod("b2", priority=2, cpu="2", node="n2"),
        pod("c1", priority=7, cpu="4", node="n3"),
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
        podgroup("job", min_member=2, phase="Inqueue"),
        pod("j1", priority=3, cpu="2", node="n1", group="job", started=1),
        pod("j2", priority=3, cpu="2", node="n1", group="job", started=2),
        pod("j3", priority=3, cpu="2", node="n2", group="job", started=3),
        pod("s", priority=4, cpu="2", node="n2"),
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
        podgroup("job", min_member=2, phase="Inqueue"),
        pod("j1", priority=3, cpu="4", node="n1", group="job"),
        pod("j2", priority=3, cpu="4", node="n2", group="job"),
        node("n3", cpu="2"),
        pod("j3", priority=3, cpu="1", node="n3", group="job"),
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
        podgroup("job", min_member=2, phase="Inqueue"),
        pod("j1", priority=3, cpu="4", node="n1", group="job"),
        pod("j2", priority=3, cpu="4", node="n2", group="job"),
        *gang(1, cpu="4"),
    ]
    d = decision(objects)
    assert sorted(victims(d)) == ["default/j1", "default/j2"]
    assert "1 whole PodGroup(s)" in d.reason


def test_a_cheaper_single_pod_is_taken_before_a_group_of_equal_priority():
    objects = [
        node("n1"),
        node("n2"),
        podgroup("job", min_member=2, phase="Inqueue"),
        pod("j1", priority=3, cpu="4", node="n1", group="job", started=0),
        pod("j2", priority=3, cpu="4", node="n2", group="job", started=0),
        node("n3"),
        pod("single", priority=3, cpu="4", node="n3", started=50),
        *gang(1, cpu="4"),
    ]
    assert victims(decision(objects)) == ["default/single"]


def test_nothing_is_taken_unless_every_member_can_be_placed():
    objects = [
        node("n1"),
        node("n2"),
        pod("a", priority=1, cpu="4", node="n1"),
        pod("b", priority=1, cpu="4", node="n2"),
        *gang(3, cpu="4"),
    ]
    d = decision(objects)
    assert d.status == "unresolved"
    assert "cannot place all 3 needed member(s)" in d.reason


def test_only_lower_priority_victims():
    objects = [
        node("n1"),
        node("n2"),
        pod("peer", priority=100, cpu="4", node="n1"),
        pod("low", priority=1, cpu="4", node="n2"),
        *gang(2, "4"),
    ]
    assert decision(objects).status == "unresolved"


def test_running_members_count_towards_min_member():
    objects = [
        node("n1"),
        node("n2"),
        pod("low", priority=1, cpu="4", node="n2"),
        *gang(3, cpu="4", min_member=2),
    ]
    objects.append(pod("running", cpu="4", priority_class="high", group="gang", node="n1"))
    d = decision(objects)
    # minMember 2 with one member placed: one pending member is needed, not three
    assert d.placements == {"default/g0": "n2"}
    assert victims(d) == ["default/low"]


def test_a_complete_gang_lets_its_other_members_preempt_one_by_one():
    objects = [
        node("n1"),
        node("n2"),
        pod("low", priority=1, cpu="4", node="n2"),
        *gang(1, cpu="4", min_member=1),
    ]
    objects.append(pod("running", cpu="4", priority_class="high", group="gang", node="n1"))
    result = outcomes(objects)
    assert list(decided(result)) == ["default/g0"]


def test_too_few_pending_members():
    objects = [node("n1"), *gang(2, min_member=3)]
    assert "only 2 are pending" in unresolved(outcomes(objects))[GANG]


def test_a_gang_that_fits_gets_no_decision():
    result = outcomes([node("n1", cpu="8"), *gang(3)])
    assert decided(result) == {} and unresolved(result) == {}


def test_a_pending_group_waits_for_its_queue():
    objects = [node("n1"), pod("low", priority=1, cpu="4", node="n1"), *gang(1, cpu="4", phase="Pending")]
    assert unresolved(outcomes(objects)) == {GANG: PENDING_GROUP}


def test_a_never_class_is_not_eligible():
    objects = [
        node("n1"),
        pod("low", priority=1, cpu="4", node="n1"),
        priority_class("calm", value=100, preemption_policy="Never"),
    ]
    objects += [
        podgroup("gang", min_member=1, priority_class="calm", phase="Inqueue"),
        pod("g0", cpu="4", priority_class="calm", group="gang"),
    ]
    assert unresolved(outcomes(objects)) == {GANG: NOT_ELIGIBLE_NEVER}


def test_a_group_with_a_protected_member_is_never_taken():
    objects = [
        node("n1"),
        podgroup("job", min_member=1, phase="Inqueue"),
        pod(
            "j1",
            priority=1,
            cpu="4",
            node="n1",
            group="job",
            labels={"priogate.io/allow-preemption": "false"},
        ),
        node("n2"),
        podgroup("other", min_member=1, phase="Inqueue"),
        pod("o1", priority=1, cpu="2", node="n2", group="other"),
        pod("o2", priority=1, cpu="2", node="n2", group="other"),
        *gang(1, cpu="4"),
    ]
    d = decision(objects)
    assert sorted(victims(d)) == ["default/o1", "default/o2"]


def test_pdbs_are_best_effort_for_gangs():
    objects = [
        node("n1"),
        node("n2"),
        pod("guarded", priority=1, cpu="4", node="n1", labels={"app": "x"}),
        pod("free", priority=5, cpu="4", node="n2", labels={"app": "y"}),
        pdb("x", match_labels={"app": "x"}, allowed=0),
        *gang(1, cpu="4"),
    ]
    assert victims(decision(objects)) == ["default/free"]
    objects.append(pod("g1", cpu="4", priority_class="high", group="gang", created=1))
    group = next(o for o in objects if o["kind"] == "PodGroup")
    group["spec"]["minMember"] = 2  # now both nodes are needed: the PDB gives way
    d = decision(objects)
    assert sorted(victims(d)) == ["default/free", "default/guarded"]
    assert "1 PDB violation(s)" in d.reason


def test_members_of_different_shapes():
    objects = [
        node("n1", cpu="8"),
        node("n2", cpu="4"),
        pod("a", priority=1, cpu="6", node="n1"),
        pod("b", priority=2, cpu="2", node="n1"),
        pod("c", priority=1, cpu="4", node="n2"),
        priority_class("high", value=100),
        podgroup("gang", min_member=2, priority_class="high", phase="Inqueue"),
        pod("driver", cpu="2", priority_class="high", group="gang", created=0),
        pod("worker", cpu="6", priority_class="high", group="gang", created=1),
    ]
    d = decision(objects)
    assert d.placements == {"default/driver": "n2", "default/worker": "n1"}
    assert sorted(victims(d)) == ["default/a", "default/c"]


@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_opted_out_pods_in_gang_preemption(mode):
    opted = {"priogate.io/allow-preemption": "false"}
    objects = [node("n1"), pod("o", priority=1, cpu="4", node="n1", labels=opted), *gang(1, cpu="4")]
    d = decision(objects, policy=PreemptionPolicy(opt_out_mode=mode))
    if mode == "hard":
        assert d.status == "unresolved"
    else:
        assert victims(d) == ["default/o"]
        assert "opted-out pods included" in d.reason


def test_explain_marks_hosting_nodes():
    objects = [
        node("n1"),
        node("n2"),
        pod("a", priority=1, cpu="4", node="n1"),
        pod("b", priority=9, cpu="4", node="n2"),
        *gang(1, cpu="4"),
    ]
    nodes = decision(objects, explain=True).nodes
    assert nodes["n1"].startswith("chosen: hosts 1 member(s), 1 victim(s) here")
    assert nodes["n2"].startswith("not used")


def test_lower_priority_nominations_on_member_nodes_are_cleared():
    objects = [
        node("b", cpu="8"),
        pod("vb", priority=1, cpu="8", node="b"),
        *gang(1, cpu="4"),
        pod("nominee", priority=50, cpu="4", nominated="b", created=1),
        pod("later", priority=40, cpu="4", created=2),
    ]
    assert decision(objects).placements == {"default/g0": "b"}
    result = outcomes(objects)
    # nominee no longer holds b's remaining 4 cores against lower priorities: "later" fits
    # there too (the scheduler sorts out who binds), so neither needs a decision. Had the
    # nomination stayed, "later" would find b held and no victim to take.
    assert list(decided(result)) == [GANG]
    assert unresolved(result) == {}


@pytest.mark.parametrize(
    ("class_value", "members", "want", "noted"),
    [
        (100, [100, 100], 100, False),
        (2_000_000_000, [0, 0], 0, True),  # class-less members of a critical group
        (100, [1000, 50], 50, True),  # the lowest member it would place
        (100, [1000], 100, True),  # never above the class
        (None, [7, 3], 3, False),  # no known class: the members alone
        (100, [], 100, False),
    ],
)
def test_a_gang_preempts_at_its_members_admitted_priority(class_value, members, want, noted):
    priority, note = gang_priority(class_value, members)
    assert priority == want
    assert bool(note) is noted


def test_class_less_members_of_a_critical_group_take_no_victim():
    objects = [
        node("n1"),
        pod("busy", priority=1000, cpu="4", node="n1"),
        priority_class("critical", value=2_000_000_000),
        podgroup("gang", min_member=1, priority_class="critical", phase="Inqueue"),
        pod("g0", priority=0, cpu="2", group="gang"),
    ]
    d = decision(objects)
    assert not d.victims
    assert "members' admitted priority 0 differs from the PodGroup's class value 2000000000" in d.reason
