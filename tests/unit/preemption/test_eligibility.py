"""Who may preempt, who may be a victim, and in which order preemptors are served."""

from __future__ import annotations

import pytest

from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.single import NOT_ELIGIBLE_NEVER, NOT_ELIGIBLE_TERMINATING
from tests.builders import node, pod, priority_class
from tests.unit.preemption.outcomes import decided, outcomes, unresolved

SOFT = PreemptionPolicy(opt_out_mode="soft")

HIGH = 100


def full_node(*victims: dict, cpu: str = "4") -> list[dict]:
    return [node("n", cpu=cpu), *victims]


# ---- preemptor eligibility -------------------------------------------------------------------


def test_preemption_policy_never_is_not_eligible():
    objects = [
        *full_node(pod("low", priority=1, cpu="4", node="n")),
        pod("p", priority=HIGH, cpu="2", preemption_policy="Never"),
    ]
    result = outcomes(objects)
    assert decided(result) == {}
    assert unresolved(result) == {"default/p": NOT_ELIGIBLE_NEVER}


def test_preemption_policy_never_from_the_class():
    objects = [
        *full_node(pod("low", priority=1, cpu="4", node="n")),
        priority_class("batch-never", value=HIGH, preemption_policy="Never"),
        pod("p", cpu="2", priority_class="batch-never"),
    ]
    assert unresolved(outcomes(objects)) == {"default/p": NOT_ELIGIBLE_NEVER}


def test_never_pod_that_fits_gets_nothing():
    objects = [node("n", cpu="4"), pod("p", priority=HIGH, cpu="2", preemption_policy="Never")]
    assert decided(outcomes(objects)) == {} and unresolved(outcomes(objects)) == {}


def test_terminating_victim_on_nominated_node_blocks_new_preemption():
    objects = [
        *full_node(
            pod("old-victim", priority=1, cpu="2", node="n", deleting=True, preempted=True),
            pod("other", priority=1, cpu="2", node="n"),
            cpu="4",
        ),
        node("m", cpu="4"),
        pod("m1", priority=1, cpu="4", node="m"),
        pod("p", priority=HIGH, cpu="4", nominated="n"),
    ]
    assert unresolved(outcomes(objects)) == {"default/p": NOT_ELIGIBLE_TERMINATING}


@pytest.mark.parametrize(
    ("victim", "why"),
    [
        (
            pod("v", priority=1, cpu="2", node="n", deleting=True, preempted=False),
            "terminating, not by the scheduler",
        ),
        (pod("v", priority=HIGH + 1, cpu="2", node="n", deleting=True, preempted=True), "higher priority"),
        (
            pod("v", priority=1, cpu="2", node="n", deleting=True, preempted=True, owner="DaemonSet"),
            "not a possible victim",
        ),
    ],
)
def test_terminating_pods_that_do_not_block(victim, why):
    objects = [
        node("n", cpu="4"),
        victim,
        pod("other", priority=1, cpu="2", node="n"),
        pod("p", priority=HIGH, cpu="2", nominated="n"),
    ]
    result = outcomes(objects)
    assert (
        "default/p" not in unresolved(result) or unresolved(result)["default/p"] != NOT_ELIGIBLE_TERMINATING
    ), why


def test_a_nominated_node_the_pod_can_never_use_does_not_block():
    objects = [
        node("n", cpu="4", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        pod("old-victim", priority=1, cpu="2", node="n", deleting=True, preempted=True),
        node("m", cpu="4"),
        pod("m1", priority=1, cpu="4", node="m"),
        pod("p", priority=HIGH, cpu="4", nominated="n"),
    ]
    assert decided(outcomes(objects)) == {"default/p": ("m", ["default/m1"])}


# ---- victims ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "protected",
    [
        pod("ds", priority=1, cpu="4", node="n", owner="DaemonSet"),
        pod("mirror", priority=1, cpu="4", node="n", annotations={"kubernetes.io/config.mirror": "hash"}),
        pod("opted", priority=1, cpu="4", node="n", labels={"priogate.io/allow-preemption": "false"}),
    ],
)
def test_never_victims(protected):
    result = outcomes([node("n", cpu="4"), protected, pod("p", priority=HIGH, cpu="2")])
    assert decided(result) == {}
    assert "no lower-priority pod to preempt" in unresolved(result)["default/p"]


def test_terminating_lower_priority_pods_free_space_without_being_victims():
    # Seed example 4: a higher-priority pod takes the node its victims' space is freeing.
    objects = [
        node("n", cpu="10"),
        pod("a", priority=100, cpu="5", node="n", deleting=True, preempted=True),
        pod("b", priority=100, cpu="5", node="n", deleting=True, preempted=True),
        pod("f", priority=2000, cpu="10"),
    ]
    result = outcomes(objects)
    assert decided(result) == {"default/f": ("n", [])}
    assert "no new victims" in next(o for o in result if o.status == "preempt").reason


def test_opt_out_soft_mode_takes_opted_out_pods_only_when_nothing_else_works():
    opted = {"priogate.io/allow-preemption": "false"}
    only_opted = [
        node("n", cpu="4"),
        pod("o", priority=1, cpu="4", node="n", labels=opted),
        pod("p", priority=HIGH, cpu="2"),
    ]
    assert decided(outcomes(only_opted, policy=PreemptionPolicy(opt_out_mode="hard"))) == {}
    result = outcomes(only_opted, policy=SOFT)
    assert decided(result) == {"default/p": ("n", ["default/o"])}
    assert "opted out" in next(o for o in result if o.status == "preempt").reason
    # With an ordinary victim elsewhere, soft mode leaves the opted-out pod alone, even though
    # the ordinary victim has a higher priority.
    both = [*only_opted, node("m", cpu="4"), pod("m1", priority=9, cpu="4", node="m")]
    assert decided(outcomes(both, policy=SOFT)) == {"default/p": ("m", ["default/m1"])}


def test_opt_out_soft_mode_spares_opted_out_pods_first_on_a_node():
    opted = {"priogate.io/allow-preemption": "false"}
    objects = [
        node("n", cpu="4"),
        pod("o", priority=1, cpu="2", node="n", labels=opted),
        pod("plain", priority=5, cpu="2", node="n", labels={"priogate.io/allow-preemption": "true"}),
        node("m", cpu="4"),
        pod("mo", priority=1, cpu="4", node="m", labels=opted),
        pod("p", priority=HIGH, cpu="4"),
    ]
    # Neither node works without an opted-out pod. Both then take one; n also needs "plain"
    # (priority 5), so m, whose only victim has priority 1, wins on the highest victim.
    assert decided(outcomes(objects, policy=SOFT)) == {"default/p": ("m", ["default/mo"])}


# ---- preemptor order and sequencing ---------------------------------------------------------------


def test_preemptors_go_by_priority_then_creation_and_never_share_freed_space():
    objects = [
        node("n", cpu="4"),
        pod("low", priority=1, cpu="4", node="n"),
        pod("second", priority=50, cpu="4", created=5),
        pod("first", priority=50, cpu="4", created=1),
        pod("top", priority=60, cpu="4", created=9),
    ]
    result = outcomes(objects)
    assert decided(result) == {"default/top": ("n", ["default/low"])}
    assert list(unresolved(result)) == ["default/first", "default/second"]


def test_gated_and_finished_pods_are_not_preemptors():
    objects = [
        node("n", cpu="4"),
        pod("low", priority=1, cpu="4", node="n"),
        pod("gated", priority=HIGH, cpu="2", gated=True),
        pod("done", priority=HIGH, cpu="2", phase="Succeeded"),
        pod("failed", priority=HIGH, cpu="2", phase="Failed"),
    ]
    result = outcomes(objects)
    assert decided(result) == {} and unresolved(result) == {}


def test_finished_pods_use_nothing():
    objects = [
        node("n", cpu="4"),
        pod("done", priority=1, cpu="4", node="n", phase="Succeeded"),
        pod("p", priority=HIGH, cpu="4"),
    ]
    assert decided(outcomes(objects)) == {} and unresolved(outcomes(objects)) == {}


def test_a_later_lower_priority_preemptor_sees_the_first_decision():
    objects = [
        node("n", cpu="4"),
        pod("v1", priority=1, cpu="2", node="n"),
        pod("v2", priority=2, cpu="2", node="n"),
        pod("big", priority=90, cpu="2", created=1),
        pod("small", priority=80, cpu="2", created=0),
    ]
    result = outcomes(objects)
    # big takes v1's space; small then takes v2's, never v1's again
    assert decided(result) == {"default/big": ("n", ["default/v1"]), "default/small": ("n", ["default/v2"])}


def test_lower_priority_nominations_on_the_chosen_node_are_cleared():
    objects = [
        node("a", cpu="8"),
        pod("v", priority=1, cpu="8", node="a"),
        pod("top", priority=90, cpu="4", created=0),
        pod("nominee", priority=50, cpu="4", nominated="a", created=1),
        pod("later", priority=40, cpu="4", created=2),
    ]
    result = outcomes(objects)
    assert decided(result) == {"default/top": ("a", ["default/v"])}
    # nominee no longer holds a's remaining 4 cores against lower priorities: "later" fits
    # there too (the scheduler sorts out who binds). Had the nomination stayed, "later"
    # would find a held and nothing it may preempt.
    assert unresolved(result) == {}


def test_a_higher_priority_nomination_holds_its_node():
    objects = [
        node("a", cpu="4"),
        pod("v", priority=1, cpu="4", node="a", deleting=True, preempted=True),
        node("b", cpu="4"),
        pod("w", priority=1, cpu="4", node="b"),
        pod("holder", priority=95, cpu="4", nominated="a", created=0),
        pod("top", priority=90, cpu="4"),
    ]
    # holder waits for its victim on a (not eligible to preempt again); top may not use a
    # (holder's nomination counts against it), so top preempts w on b.
    result = outcomes(objects)
    assert unresolved(result) == {"default/holder": NOT_ELIGIBLE_TERMINATING}
    assert decided(result) == {"default/top": ("b", ["default/w"])}


def test_unknown_priority_class_counts_as_zero_and_says_so():
    objects = [
        node("n", cpu="4"),
        pod("v", priority=1, cpu="4", node="n"),
        pod("p", cpu="2", priority_class="missing"),
    ]
    result = outcomes(objects)
    assert decided(result) == {}
    assert 'PriorityClass "missing" not found, priority 0 assumed' in unresolved(result)["default/p"]


def test_global_default_class_applies_to_pods_without_a_class():
    objects = [
        priority_class("everyday", value=50, default=True),
        priority_class("cheaper-default", value=10, default=True),  # the lowest default wins
        node("n", cpu="4"),
        pod("v", priority=5, cpu="4", node="n"),
        pod("p", cpu="2"),
    ]
    assert decided(outcomes(objects)) == {"default/p": ("n", ["default/v"])}
    objects[3] = pod("v", priority=10, cpu="4", node="n")  # equal priority: not a victim
    assert decided(outcomes(objects)) == {}
