"""Hard topology spread constraints in single-pod preemption: the rows model upstream's e2e test
(test/e2e/scheduling/preemption.go, "PodTopologySpread Preemption validates proper pods are
preempted") and the spread rows of SelectVictimsOnNode's and DefaultPreemption's unit tests
(pkg/scheduler/framework/plugins/defaultpreemption/default_preemption_test.go)."""

from __future__ import annotations

from typing import Any

import pytest

from priogate.preemption.engine import prepare
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.single import preempt_pod
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption.spread import parse_spread
from priogate.preemption.spread_fit import NODE_LABEL_NOT_MATCH
from tests.builders import node, pod
from tests.unit.preemption.outcomes import decided, outcomes, unresolved

FAKE = "example.com/fakePTSRes"
KEY = "kubernetes.io/e2e-pts-preemption"
LOW, MEDIUM, HIGH = 1, 50, 100


def spread(
    key: str,
    max_skew: int = 1,
    *,
    exists: str = "foo",
    when: str = "DoNotSchedule",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchExpressions": [{"key": exists, "operator": "Exists"}]},
        **extra,
    }


def with_spread(obj: dict[str, Any], *constraints: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["topologySpreadConstraints"] = list(constraints)
    return obj


def e2e_cluster(medium_constraints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two nodes of 10 fake units, one per domain; `high` (9) on node-0, low-1..3 (3 each) on
    node-1; `medium` asks for 3 and spreads over the test's key with maxSkew 1."""
    nodes = [node(f"node-{i}", allocatable={FAKE: "10"}, labels={KEY: f"node-{i}"}) for i in (0, 1)]
    label = {"e2e-pts-preemption": ""}
    bound = [pod("high", priority=HIGH, requests={FAKE: "9"}, node="node-0", labels=label)]
    bound += [
        pod(f"low-{i}", priority=LOW, requests={FAKE: "3"}, node="node-1", labels=label, started=i)
        for i in (1, 2, 3)
    ]
    medium = pod("medium", priority=MEDIUM, requests={FAKE: "3"}, labels=label)
    return [*nodes, *bound, with_spread(medium, *medium_constraints)]


def test_the_e2e_scenario_takes_two_low_pods_to_keep_the_spread() -> None:
    # Resources alone need one victim (low-3); the spread [high] vs [medium, low, low] would
    # have skew 2, so kube-scheduler takes low-2 as well and keeps low-1.
    found = outcomes(e2e_cluster([spread(KEY, exists="e2e-pts-preemption")]))
    assert decided(found) == {"default/medium": ("node-1", ["default/low-2", "default/low-3"])}


def test_without_the_constraint_one_victim_is_enough() -> None:
    found = outcomes(e2e_cluster([]))
    assert decided(found) == {"default/medium": ("node-1", ["default/low-3"])}


def test_a_schedule_anyway_constraint_changes_nothing() -> None:
    found = outcomes(e2e_cluster([spread(KEY, exists="e2e-pts-preemption", when="ScheduleAnyway")]))
    assert decided(found) == {"default/medium": ("node-1", ["default/low-3"])}


def test_a_larger_max_skew_lets_one_victim_do() -> None:
    found = outcomes(e2e_cluster([spread(KEY, 2, exists="e2e-pts-preemption")]))
    assert decided(found) == {"default/medium": ("node-1", ["default/low-3"])}


def test_a_selector_the_pods_do_not_match_counts_nothing() -> None:
    found = outcomes(e2e_cluster([spread(KEY, exists="other")]))
    assert decided(found) == {"default/medium": ("node-1", ["default/low-3"])}


def test_pods_of_another_namespace_do_not_count() -> None:
    objects = e2e_cluster([spread(KEY, exists="e2e-pts-preemption")])
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"].startswith("low"):
            obj["metadata"]["namespace"] = "other"
    found = outcomes(objects)
    assert decided(found) == {"default/medium": ("node-1", ["other/low-3"])}


def test_min_domains_beyond_the_domains_counts_the_minimum_as_zero() -> None:
    # minDomains 3 with 2 domains: global minimum 0, so node-1 may keep at most 0 matching
    # pods (skew = count + 1 <= 1): every low pod goes.
    found = outcomes(e2e_cluster([spread(KEY, exists="e2e-pts-preemption", minDomains=3)]))
    every = ["default/low-1", "default/low-2", "default/low-3"]
    assert decided(found) == {"default/medium": ("node-1", every)}


def hostnames(*names_zones: str) -> list[dict[str, Any]]:
    """node-a/zone1 style names, as upstream's tests write them: label zone and hostname."""
    out = []
    for spec in names_zones:
        name, zone = spec.split("/")
        out.append(node(name, labels={"zone": zone, "hostname": name}))
    return out


def upstream_cluster(a1: int, a2: int, b1: int) -> list[dict[str, Any]]:
    foo = {"foo": ""}
    return [
        *hostnames("node-a/zone1", "node-b/zone1", "node-x/zone2"),
        pod("pod-a1", priority=a1, node="node-a", labels=foo),
        pod("pod-a2", priority=a2, node="node-a", labels=foo),
        pod("pod-b1", priority=b1, node="node-b", labels=foo),
        pod("pod-x1", priority=HIGH, node="node-x", labels=foo),
        pod("pod-x2", priority=HIGH, node="node-x", labels=foo),
        with_spread(pod("p", priority=HIGH, labels=foo), spread("zone"), spread("hostname")),
    ]


def test_upstream_select_victims_on_node_rows() -> None:
    """ "preemption to resolve pod topology spread filter failure": node-a loses pod-a2 (its
    mid-priority pod-a1 stays), node-b pod-b1, node-x has no victim; kube-scheduler's node
    order then picks the lower victim priority... both are low: fewest victims, then the
    latest start; the builders start every pod at EPOCH, so the node name decides."""
    state = prepare(build_snapshot(upstream_cluster(MEDIUM, LOW, LOW)))
    outcome = preempt_pod(state, state.pods["default/p"], policy=PreemptionPolicy(), explain=True)
    assert outcome.status == "preempt"
    assert (outcome.node, [v.key for v in outcome.victims]) == ("node-a", ["default/pod-a2"])
    assert outcome.nodes is not None
    assert outcome.nodes["node-b"].startswith("lost to node-a")
    assert "pod topology spread" in outcome.nodes["node-x"]


def test_upstream_post_filter_row_picks_the_node_that_can_lose_a_pod() -> None:
    """ "preemption for topology spread constraints": only pod-b1 is below the preemptor."""
    found = outcomes(upstream_cluster(HIGH, HIGH, LOW))
    assert decided(found) == {"default/p": ("node-b", ["default/pod-b1"])}


def test_a_pod_that_fits_resources_but_not_the_spread_still_preempts() -> None:
    # Resources fit everywhere (no requests); the filter fails everywhere until a pod goes.
    found = outcomes(upstream_cluster(MEDIUM, LOW, LOW))
    assert "default/p" in decided(found)


def test_a_node_without_the_topology_key_cannot_help() -> None:
    foo = {"foo": ""}
    objects = [
        node("bare", cpu="1"),
        pod("v", priority=LOW, cpu="1", node="bare", labels=foo),
        with_spread(pod("p", priority=HIGH, cpu="1", labels=foo), spread("zone")),
    ]
    assert unresolved(outcomes(objects))["default/p"].startswith("preemption is not helpful")
    state = prepare(build_snapshot(objects))
    outcome = preempt_pod(state, state.pods["default/p"], policy=PreemptionPolicy(), explain=True)
    assert outcome.nodes == {"bare": NODE_LABEL_NOT_MATCH}


def test_a_higher_priority_pod_nominated_to_the_node_counts_in_its_domain() -> None:
    # zone1: node-a with one low pod; zone2: node-x with one high pod. Without nominations p
    # fits node-a after removing nothing... with a matching high pod nominated to node-a,
    # node-a's domain counts 2 (+1 self) against zone2's 1: the low pod must go.
    foo = {"foo": ""}
    objects = [
        node("node-a", cpu="4", labels={"zone": "zone1"}),
        node("node-x", cpu="1", labels={"zone": "zone2"}),
        pod("low", priority=LOW, cpu="1", node="node-a", labels=foo),
        pod("x", priority=HIGH, cpu="1", node="node-x", labels=foo),
        pod("nominee", priority=HIGH + 1, cpu="1", nominated="node-a", labels=foo),
        with_spread(pod("p", priority=HIGH, cpu="1", labels=foo), spread("zone")),
    ]
    state = prepare(build_snapshot(objects))
    outcome = preempt_pod(state, state.pods["default/p"], policy=PreemptionPolicy(), explain=False)
    assert (outcome.status, outcome.node, [v.key for v in outcome.victims]) == (
        "preempt",
        "node-a",
        ["default/low"],
    )


def test_a_victim_that_does_not_match_is_never_needed_for_the_spread() -> None:
    # node-1 holds two matching low pods and one that does not match; zone a counts none.
    # Resources need one victim; the spread (skew 2 + 1 - 0) needs two matching victims: the
    # non-matching pod, the most important, is reprieved.
    label = {"app": "x"}
    objects = [
        node("node-0", cpu="2", labels={"zone": "a"}),
        node("node-1", cpu="3", labels={"zone": "b"}),
        pod("x0", priority=HIGH, cpu="2", node="node-0"),
        pod("m1", priority=LOW, cpu="1", node="node-1", labels=label, started=1),
        pod("m2", priority=LOW, cpu="1", node="node-1", labels=label, started=2),
        pod("other", priority=LOW, cpu="1", node="node-1", started=0),
        with_spread(pod("p", priority=HIGH, cpu="1", labels=label), spread("zone", exists="app")),
    ]
    assert decided(outcomes(objects)) == {"default/p": ("node-1", ["default/m1", "default/m2"])}


def test_parse_keeps_only_hard_constraints_and_merges_match_label_keys() -> None:
    raw = [
        spread("zone", when="ScheduleAnyway"),
        spread("zone", matchLabelKeys=["rev", "missing"]),
        {"maxSkew": 2, "topologyKey": "host", "whenUnsatisfiable": "DoNotSchedule"},
    ]
    parsed = parse_spread(raw, {"rev": "7", "foo": ""}, "Pod default/p")
    assert len(parsed) == 2
    assert parsed[0].matches({"rev": "7", "foo": ""}) and not parsed[0].matches({"rev": "8", "foo": ""})
    assert parsed[1].selector is None and not parsed[1].matches({"foo": ""}) and not parsed[1].counts
    assert (parsed[1].min_domains, parsed[1].honor_affinity, parsed[1].honor_taints) == (1, True, False)


@pytest.mark.parametrize(
    "bad",
    [
        [{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
        [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}],
        [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "x"}],
        {"maxSkew": 1},
    ],
)
def test_malformed_constraints_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="Pod default/p"):
        parse_spread(bad, {}, "Pod default/p")


def test_policies_that_shape_victims_refuse_victims_that_break_the_spread() -> None:
    # The policies choose victims on resources only (docs/limits.md): their one victim
    # would leave skew 2, so the pod is left unresolved rather than preempting uselessly.
    state = prepare(build_snapshot(e2e_cluster([spread(KEY, exists="e2e-pts-preemption")])))
    policy = PreemptionPolicy(qos_order=True)
    outcome = preempt_pod(state, state.pods["default/medium"], policy=policy, explain=True)
    assert outcome.status == "unresolved"
    assert "topology spread constraints unsatisfied" in outcome.reason


def test_policies_keep_victims_that_satisfy_the_spread() -> None:
    state = prepare(build_snapshot(e2e_cluster([spread(KEY, 2, exists="e2e-pts-preemption")])))
    outcome = preempt_pod(
        state, state.pods["default/medium"], policy=PreemptionPolicy(qos_order=True), explain=False
    )
    assert (outcome.status, [v.key for v in outcome.victims]) == ("preempt", ["default/low-3"])
