"""priogate's policies over kube-scheduler's preemption candidates (priogate/preemption/extender.py):
table tests per policy, and properties over random clusters and candidates.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption.engine import prepare
from priogate.preemption.extender import Victims, shape
from priogate.preemption.extender_gangs import broken_group
from priogate.preemption.parse import parse_pod
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption.shaped import exceeds_pdbs
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption.state import ClusterState, is_pending
from priogate.preemption.unmodelled import engine_blind
from tests.builders import node, pdb, pod
from tests.unit.preemption.test_policy_properties import POLICIES, group_clusters

OPT_OUT = {"priogate.io/allow-preemption": "false"}
UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


def state_of(*objects: dict[str, Any]) -> ClusterState:
    return prepare(build_snapshot(list(objects)))


def preemptor(cpu: str = "2", priority: int = 10, **kw: Any) -> dict[str, Any]:
    return pod("hi", priority=priority, cpu=cpu, **kw)


def two_nodes() -> tuple[dict[str, Any], ...]:
    return (node("n1", cpu="2"), node("n2", cpu="2"))


def kept(result: Any) -> dict[str, tuple[str, ...]]:
    return {n: v.pods for n, v in result.nodes.items()}


# ---- engine_blind ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"containers": [{"name": "c"}]}, ""),
        # any inter-pod (anti-)affinity, even preferred only: conservative
        (
            {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
            "inter-pod affinity",
        ),
        (
            {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}},
            "inter-pod affinity",
        ),
        ({"affinity": {"nodeAffinity": {"x": 1}}}, ""),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}, "hostPorts"),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}, ""),
        ({"volumes": [{"name": "v", "configMap": {"name": "x"}}, {"name": "t", "emptyDir": {}}]}, ""),
        ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}}]}, "volume data"),
        ({"resourceClaims": [{"name": "gpu"}]}, "resource claims"),
        ({"containers": ["junk"], "volumes": ["junk"]}, ""),
    ],
)
def test_engine_blind(spec: dict[str, Any], why: str) -> None:
    assert engine_blind({"spec": spec}) == why


def test_engine_blind_malformed_spec() -> None:
    assert engine_blind({"spec": "x"}) == "malformed spec"


# ---- defaults ----------------------------------------------------------------------------------


def test_default_policy_returns_the_schedulers_candidates_unchanged() -> None:
    state = state_of(
        *two_nodes(),
        pod("a", priority=1, cpu="2", node="n1"),
        pod("b", priority=2, cpu="2", node="n2"),
        preemptor(),
    )
    candidates = {"n1": Victims(("default/a",), 0), "n2": Victims(("default/b",), 1)}
    result = shape(state.pods["default/hi"], candidates, state, DEFAULT_POLICY, now=0)
    assert result.nodes == candidates and result.unchanged


def test_a_victim_priogate_has_not_seen_drops_its_node() -> None:
    state = state_of(*two_nodes(), pod("a", priority=1, cpu="2", node="n1"), preemptor())
    candidates = {"n1": Victims(("default/a",)), "n2": Victims(("default/ghost",))}
    result = shape(state.pods["default/hi"], candidates, state, DEFAULT_POLICY, now=0)
    assert kept(result) == {"n1": ("default/a",)}
    assert "not (yet) on this node" in result.reasons["n2"]


# ---- hard rules: drop, or replace on a transparent node ----------------------------------------


def opted_out_cluster() -> ClusterState:
    return state_of(
        node("n1", cpu="4"),
        node("n2", cpu="2"),
        # n1: the scheduler took the opted-out pod (it is the least important), an old pod
        # of priority 1 could go instead.
        pod("keep", priority=1, cpu="2", node="n1", started=0),
        pod("opted", priority=1, cpu="2", node="n1", started=5, labels=OPT_OUT),
        pod("b", priority=2, cpu="2", node="n2"),
        preemptor(),
    )


def test_hard_opt_out_replaces_the_victims_on_a_transparent_node() -> None:
    state = opted_out_cluster()
    candidates = {"n1": Victims(("default/opted",)), "n2": Victims(("default/b",))}
    result = shape(state.pods["default/hi"], candidates, state, DEFAULT_POLICY, now=0)
    assert kept(result) == {"n1": ("default/keep",), "n2": ("default/b",)}
    assert "replaced" in result.reasons["n1"]


def test_hard_opt_out_drops_the_node_when_a_pod_there_is_opaque_to_the_engine() -> None:
    state = opted_out_cluster()
    candidates = {"n1": Victims(("default/opted",)), "n2": Victims(("default/b",))}

    def blind(key: str) -> str:
        return "hostPorts" if key == "default/keep" else ""

    result = shape(state.pods["default/hi"], candidates, state, DEFAULT_POLICY, now=0, blind=blind)
    assert kept(result) == {"n2": ("default/b",)}
    assert "opted out" in result.reasons["n1"] and "hostPorts" in result.reasons["n1"]


def test_hard_opt_out_drops_every_node_when_the_preemptor_is_opaque() -> None:
    state = opted_out_cluster()
    candidates = {"n1": Victims(("default/opted",))}

    def blind(key: str) -> str:
        return "inter-pod affinity" if key == "default/hi" else ""

    result = shape(state.pods["default/hi"], candidates, state, DEFAULT_POLICY, now=0, blind=blind)
    assert result.nodes == {}
    assert "the preemptor has inter-pod affinity" in result.reasons["n1"]


def test_daemonset_pods_are_never_victims() -> None:
    state = state_of(
        node("n1", cpu="2"), pod("ds", priority=1, cpu="2", node="n1", owner="DaemonSet"), preemptor()
    )
    result = shape(state.pods["default/hi"], {"n1": Victims(("default/ds",))}, state, DEFAULT_POLICY, now=0)
    assert result.nodes == {} and "DaemonSet pod" in result.reasons["n1"]


def test_strict_pdb_drops_a_node_whose_victims_exceed_the_budget() -> None:
    state = state_of(
        *two_nodes(),
        pod("a", priority=1, cpu="2", node="n1", labels={"app": "db"}),
        pod("b", priority=1, cpu="2", node="n2"),
        pdb("db", match_labels={"app": "db"}, allowed=0),
        preemptor(),
    )
    candidates = {"n1": Victims(("default/a",), 1), "n2": Victims(("default/b",))}
    policy = PreemptionPolicy(pdb_mode="strict")
    result = shape(state.pods["default/hi"], candidates, state, policy, now=0)
    assert kept(result) == {"n2": ("default/b",)}
    assert "PodDisruptionBudget" in result.reasons["n1"]


# ---- policies that change victims --------------------------------------------------------------


def test_qos_order_replaces_the_victims_on_a_transparent_node_only() -> None:
    state = state_of(
        node("n1", cpu="4", pods=2),
        pod("be", priority=1, node="n1", started=0),
        pod(
            "g", priority=1, cpu="1", memory="1Gi", limits={"cpu": "1", "memory": "1Gi"}, node="n1", started=5
        ),
        pod("hi", priority=10, cpu="1"),
    )
    candidates = {"n1": Victims(("default/g",))}  # the later start, kube-scheduler's choice
    policy = PreemptionPolicy(qos_order=True)
    result = shape(state.pods["default/hi"], candidates, state, policy, now=0)
    assert kept(result) == {"n1": ("default/be",)}
    opaque = shape(state.pods["default/hi"], candidates, state, policy, now=0, blind=lambda k: "hostPorts")
    assert opaque.nodes == candidates  # the scheduler's victims break no hard rule: kept


def test_single_strategy_keeps_only_the_node_with_the_closest_victim() -> None:
    state = state_of(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod("small", priority=1, cpu="1500m", node="n1"),
        pod("exact", priority=1, cpu="2", node="n2"),
        preemptor(cpu="2"),
    )
    candidates = {"n1": Victims(("default/small",)), "n2": Victims(("default/exact",))}
    policy = PreemptionPolicy(victim_selection=("single",), single_victim_deviation=30)
    result = shape(state.pods["default/hi"], candidates, state, policy, now=0)
    assert kept(result) == {"n2": ("default/exact",)}
    assert "preferred by the single strategy" in result.reasons["n1"]


def test_a_preemptor_the_view_does_not_show_yet_is_judged_by_the_request_it_came_with() -> None:
    """kube-scheduler tries a pod the moment it is created: before the watch shows it, its
    request comes from the pod kube-scheduler sent, and the policies still choose the node."""
    state = state_of(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod("small", priority=1, cpu="1500m", node="n1"),
        pod("exact", priority=1, cpu="2", node="n2"),
    )
    fresh = parse_pod(preemptor(cpu="2"), {}, None)
    assert fresh.key not in state.pods
    candidates = {"n1": Victims(("default/small",)), "n2": Victims(("default/exact",))}
    policy = PreemptionPolicy(victim_selection=("single",), single_victim_deviation=30)
    result = shape(fresh, candidates, state, policy, now=0)
    assert kept(result) == {"n2": ("default/exact",)}


def test_single_strategy_on_opaque_nodes_judges_the_schedulers_victims() -> None:
    state = state_of(
        node("n1", cpu="2"),
        node("n2", cpu="4"),
        pod("far", priority=1, cpu="1", node="n1"),
        pod("x", priority=1, cpu="2", node="n2"),
        pod("y", priority=1, cpu="2", node="n2"),
        preemptor(cpu="2"),
    )
    candidates = {"n1": Victims(("default/far",)), "n2": Victims(("default/x", "default/y"))}
    policy = PreemptionPolicy(victim_selection=("single", "kube-scheduler"), single_victim_deviation=10)
    result = shape(state.pods["default/hi"], candidates, state, policy, now=0, blind=lambda k: "hostPorts")
    # no single victim within 10% on either node: the kube-scheduler strategy keeps both
    assert result.nodes == candidates


def test_multiple_strategy_keeps_the_node_with_the_fewest_victims_within_max() -> None:
    state = state_of(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod("a", priority=1, cpu="1", node="n1"),
        pod("b", priority=1, cpu="1", node="n1"),
        pod("c", priority=3, cpu="2", node="n2"),
        preemptor(cpu="2"),
    )
    candidates = {"n1": Victims(("default/a", "default/b")), "n2": Victims(("default/c",))}
    policy = PreemptionPolicy(victim_selection=("multiple",), max_victims=1)
    result = shape(state.pods["default/hi"], candidates, state, policy, now=0)
    assert kept(result) == {"n2": ("default/c",)}


def test_soft_opt_out_takes_an_opted_out_pod_only_when_no_node_works_without() -> None:
    state = state_of(
        node("n1", cpu="2"),
        node("n2", cpu="2"),
        pod("opted", priority=1, cpu="2", node="n1", labels=OPT_OUT),
        pod("plain", priority=3, cpu="2", node="n2"),
        preemptor(cpu="2"),
    )
    candidates = {"n1": Victims(("default/opted",)), "n2": Victims(("default/plain",))}
    policy = PreemptionPolicy(opt_out_mode="soft")
    assert kept(shape(state.pods["default/hi"], candidates, state, policy, now=0)) == {
        "n2": ("default/plain",)
    }
    only = {"n1": Victims(("default/opted",))}
    assert kept(shape(state.pods["default/hi"], only, state, policy, now=0)) == {"n1": ("default/opted",)}
    hard = shape(state.pods["default/hi"], only, state, DEFAULT_POLICY, now=0)
    assert hard.nodes == {}


# ---- properties --------------------------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn, policies: st.SearchStrategy[PreemptionPolicy]) -> tuple:
    objects = draw(group_clusters())
    state = prepare(build_snapshot(objects))
    pending = sorted(p.key for p in state.pods.values() if is_pending(p) and not p.gated)
    hi = state.pods[draw(st.sampled_from(pending))]
    candidates: dict[str, Victims] = {}
    for name, node_state in sorted(state.nodes.items()):
        lower = sorted(
            (p for p in node_state.pods if p.priority < hi.priority and not p.terminating),
            key=lambda p: p.key,
        )
        if lower and draw(st.booleans()):
            keys = [p.key for p in lower]
            chosen = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True))
            candidates[name] = Victims(tuple(chosen), draw(st.integers(0, 1)))
    opaque = draw(st.sets(st.sampled_from(sorted(state.pods))))
    policy = draw(policies)
    return state, hi, candidates, opaque, policy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(st.just(DEFAULT_POLICY)))
def test_default_policy_is_identity_without_opted_out_or_protected_victims(scenario: tuple) -> None:
    state, hi, candidates, opaque, policy = scenario
    candidates = {
        n: v
        for n, v in candidates.items()
        if not any(state.pods[k].opted_out or state.pods[k].protected for k in v.pods)
    }
    blind = lambda key: "hostPorts" if key in opaque else ""  # noqa: E731
    result = shape(hi, candidates, state, policy, now=0, blind=blind)
    assert result.nodes == candidates and result.unchanged


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(POLICIES))
def test_the_output_keeps_the_hard_rules_and_stays_within_the_candidates(scenario: tuple) -> None:
    state, hi, candidates, opaque, policy = scenario
    blind = lambda key: "hostPorts" if key in opaque else ""  # noqa: E731
    result = shape(hi, candidates, state, policy, now=0, blind=blind)
    assert set(result.nodes) <= set(candidates)
    assert set(result.reasons) <= set(candidates)
    for name in candidates:
        assert name in result.nodes or name in result.reasons
    if "kube-scheduler" not in policy.victim_selection:
        assert len(result.nodes) <= 1  # single and multiple choose the node
    for name, victims in result.nodes.items():
        pods = [state.pods[k] for k in victims.pods]
        assert pods, "a node without victims is an error for kube-scheduler"
        assert all(p.node_name == name for p in pods)
        assert all(p.priority < hi.priority and not p.terminating and not p.protected for p in pods)
        if policy.opt_out_mode == "hard":
            assert not any(p.opted_out for p in pods)
        if policy.pdb_mode == "strict":
            assert not exceeds_pdbs(state, pods)
        if policy.gang_aware_victims:
            assert not broken_group(state, pods)
        transparent = (
            hi.key not in opaque
            and not hi.spread
            and not any(p.key in opaque for p in (*state.nodes[name].pods, *state.nominated.get(name, ())))
        )
        if not transparent:
            assert victims == candidates[name], "only the engine on a transparent node changes victims"


def test_reasons_name_no_pod_of_another_namespace() -> None:
    theirs = pod("secret-db", namespace="other", priority=1, cpu="2", node="n1", labels=OPT_OUT)
    state = state_of(node("n1", cpu="2"), theirs, preemptor())
    result = shape(
        state.pods["default/hi"], {"n1": Victims(("other/secret-db",))}, state, DEFAULT_POLICY, now=0
    )
    assert result.nodes == {}
    assert "secret-db" not in result.reasons["n1"] and "another namespace" in result.reasons["n1"]
