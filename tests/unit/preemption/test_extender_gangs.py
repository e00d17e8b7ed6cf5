"""priogate's gang rules over kube-scheduler's preemption candidates (priogate/preemption/extender.py,
extender_gangs.py): a gang is never broken for a single pod, and a gang's members count for it
whatever the watch view shows yet.
"""

from __future__ import annotations

from typing import Any

from priogate.preemption.extender import Victims, shape
from priogate.preemption.extender_gangs import UNKNOWN_GROUP
from priogate.preemption.parse import parse_pod
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption.state import ClusterState
from tests.builders import node, pod, podgroup
from tests.unit.preemption.test_extender import UNSCHEDULABLE, kept, preemptor, state_of


def test_gang_aware_victims_take_a_surplus_member_instead_of_breaking_the_group() -> None:
    state = state_of(
        node("n1", cpu="4"),
        node("n2", cpu="2"),
        podgroup("g", min_member=2, phase="Running"),
        pod("m1", priority=1, cpu="2", node="n1", group="g", started=0),
        pod("m2", priority=1, cpu="2", node="n1", group="g", started=1),
        pod("m3", priority=1, cpu="2", node="n2", group="g", started=2),
        preemptor(),
    )
    policy = PreemptionPolicy(gang_aware_victims=True)
    # Both of n1's members would leave one of minMember 2: m2 alone is surplus and suffices.
    candidates = {"n1": Victims(("default/m1", "default/m2")), "n2": Victims(("default/m3",))}
    result = shape(state.pods["default/hi"], candidates, state, policy, now=0)
    assert kept(result) == {"n1": ("default/m2",), "n2": ("default/m3",)}
    opaque = shape(state.pods["default/hi"], candidates, state, policy, now=0, blind=lambda k: "hostPorts")
    assert kept(opaque) == {"n2": ("default/m3",)} and "below minMember" in opaque.reasons["n1"]


def test_the_start_delay_keeps_nothing_until_it_passes() -> None:
    hi = preemptor()
    hi["status"] = {
        "phase": "Pending",
        "conditions": [{**UNSCHEDULABLE, "lastTransitionTime": "1970-01-01T00:00:10Z"}],
    }
    state = state_of(node("n1", cpu="2"), pod("a", priority=1, cpu="2", node="n1"), hi)
    candidates = {"n1": Victims(("default/a",))}
    policy = PreemptionPolicy(start_delay=30)
    early = shape(state.pods["default/hi"], candidates, state, policy, now=20)
    assert early.nodes == {} and "--preemption-start-delay" in early.reasons["n1"] and early.waiting
    late = shape(state.pods["default/hi"], candidates, state, policy, now=45)
    assert late.nodes == candidates


def short_gang(m1: dict[str, Any]) -> ClusterState:
    """Gang g of two members, m1 and m2, both pending, and one node n1 that the low pod a fills."""
    return state_of(
        node("n1", cpu="2"),
        podgroup("g", min_member=2, phase="Inqueue"),
        m1,
        pod("m2", priority=10, cpu="2", group="g"),
        pod("a", priority=1, cpu="2", node="n1"),
    )


def test_a_member_of_a_gang_short_of_min_member_is_left_to_gang_preemption() -> None:
    member = pod("m1", priority=10, cpu="2", group="g")
    member["status"] = {"phase": "Pending"}
    state = short_gang(member)
    result = shape(state.pods["default/m1"], {"n1": Victims(("default/a",))}, state, DEFAULT_POLICY, now=0)
    assert result.nodes == {} and result.waiting and result.gang
    assert "gang preemption" in result.reasons["n1"]


def test_a_member_the_view_does_not_show_yet_still_counts_for_its_gang() -> None:
    """kube-scheduler tries a pod the moment it is created: the preemptor comes from its request
    while the watch shows only the member already placed, and the group is still short of it."""
    state = state_of(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        podgroup("g", min_member=2, phase="Inqueue"),
        pod("m1", priority=10, cpu="2", group="g", node="n2"),
        pod("a", priority=1, cpu="2", node="n1"),
    )
    fresh = parse_pod(pod("m2", priority=10, cpu="2", group="g"), {}, None)
    assert fresh.key not in state.pods
    result = shape(fresh, {"n1": Victims(("default/a",))}, state, DEFAULT_POLICY, now=0)
    assert result.nodes == {} and result.waiting and result.gang
    assert "gang preemption" in result.reasons["n1"]


def test_a_member_the_view_still_shows_gated_counts_for_its_gang() -> None:
    """priogate lifts a member's scheduling gate when its group is Inqueue and kube-scheduler
    tries it at once, before the watch shows the gate gone."""
    gated = pod("m1", priority=10, cpu="2", group="g")
    gated["spec"]["schedulingGates"] = [{"name": "priogate.io/podgroup"}]
    state = short_gang(gated)
    assert state.pods["default/m1"].gated
    result = shape(state.pods["default/m1"], {"n1": Victims(("default/a",))}, state, DEFAULT_POLICY, now=0)
    assert result.nodes == {} and result.gang


def test_a_pod_whose_group_the_view_does_not_show_yet_preempts_for_nobody() -> None:
    state = state_of(node("n1", cpu="2"), pod("a", priority=1, cpu="2", node="n1"))
    early = parse_pod(pod("m1", priority=10, cpu="2", group="g"), {}, None)
    result = shape(early, {"n1": Victims(("default/a",))}, state, DEFAULT_POLICY, now=0)
    assert result.nodes == {} and result.gang
    assert result.reasons["n1"] == UNKNOWN_GROUP
    alone = parse_pod(pod("solo", priority=10, cpu="2"), {}, None)
    assert shape(alone, {"n1": Victims(("default/a",))}, state, DEFAULT_POLICY, now=0).nodes
