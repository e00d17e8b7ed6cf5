"""The victim selection strategies, DaemonSet preemptors and the PDB mode: one table per
policy, as test_policies."""

from __future__ import annotations

from typing import Any

import pytest

from priogate.preemption.policy import PreemptionPolicy
from tests.builders import node, pdb, pod, podgroup
from tests.unit.preemption.outcomes import decided, outcomes, unresolved
from tests.unit.preemption.test_policies import DEFAULT, HIGH, result


def pinned_to(name: str) -> list[dict[str, Any]]:
    """A DaemonSet pod's required node affinity (the DaemonSet controller's)."""
    return [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]


# ---- 5. victim selection strategies -----------------------------------------------------------

FEWEST = [
    node("a", cpu="6"),
    pod("v1", priority=1, cpu="1", node="a"),
    pod("v2", priority=2, cpu="1", node="a"),
    pod("v3", priority=3, cpu="4", node="a"),
    pod("p", priority=HIGH, cpu="2"),
]
CLOSEST = [
    node("a", cpu="4"),
    node("b", cpu="5"),
    pod("a1", priority=1, cpu="3", node="a"),
    pod("a2", priority=2, cpu="1", node="a"),
    pod("b1", priority=5, cpu="2200m", node="b"),
    pod("b2", priority=5, cpu="1900m", node="b"),
    pod("p", priority=HIGH, cpu="2"),
]


@pytest.mark.parametrize(
    ("objects", "policy", "expected"),
    [
        # kube-scheduler: lowest priorities first, two victims
        (FEWEST, DEFAULT, ("a", ["default/v2", "default/v1"])),
        # multiple: the fewest victims
        (FEWEST, PreemptionPolicy(victim_selection=("multiple",)), ("a", ["default/v3"])),
        # single: no victim within 10% of 2 cpu; the fallback decides
        (FEWEST, PreemptionPolicy(victim_selection=("single", "multiple")), ("a", ["default/v3"])),
        (
            FEWEST,
            PreemptionPolicy(victim_selection=("single", "kube-scheduler")),
            ("a", ["default/v2", "default/v1"]),
        ),
        # kube-scheduler takes a1 (priority 1); single the closest request (1900m: 5% off,
        # 2200m 10%, a1's 3 cpu 50%)
        (CLOSEST, DEFAULT, ("a", ["default/a1"])),
        (CLOSEST, PreemptionPolicy(victim_selection=("single",)), ("b", ["default/b2"])),
        (
            CLOSEST,
            PreemptionPolicy(victim_selection=("single",), single_victim_deviation=5),
            ("b", ["default/b2"]),
        ),
        (
            CLOSEST,
            PreemptionPolicy(victim_selection=("single",), single_victim_deviation=4),
            "no victims under the policies (victim selection single): "
            "2 node(s) no single victim within --single-victim-deviation",
        ),
    ],
    ids=[
        "default",
        "multiple",
        "single falls back to multiple",
        "single falls back to kube-scheduler",
        "closest default",
        "single",
        "single 5%",
        "single 4%",
    ],
)
def test_victim_selection(objects: list, policy: PreemptionPolicy, expected: Any) -> None:
    assert result(objects, policy) == expected


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        (
            PreemptionPolicy(victim_selection=("single",)),
            "1 node(s) no single victim within --single-victim-deviation",
        ),
        (
            PreemptionPolicy(victim_selection=("multiple",), max_victims=1),
            "1 node(s) only with more victims than --max-victims",
        ),
    ],
)
def test_victim_selection_without_a_choice(policy: PreemptionPolicy, reason: str) -> None:
    # two victims are needed at least: a1 and a2 of 1 cpu each
    objects = [
        node("a", cpu="2"),
        pod("a1", priority=1, cpu="1", node="a"),
        pod("a2", priority=1, cpu="1", node="a"),
        pod("p", priority=HIGH, cpu="2"),
    ]
    assert result(objects, DEFAULT) == ("a", ["default/a1", "default/a2"])
    found = result(objects, policy)
    assert isinstance(found, str) and reason in found, found


def test_strategy_named_in_the_reason() -> None:
    (outcome,) = outcomes(FEWEST, policy=PreemptionPolicy(victim_selection=("multiple",)))
    assert "by the multiple strategy: the fewest victims of any node" in outcome.reason
    (outcome,) = outcomes(CLOSEST, policy=PreemptionPolicy(victim_selection=("single",)))
    assert "by the single strategy: its request deviates 5.0% from the preemptor's" in outcome.reason


# ---- 6. DaemonSet pods: victims only on their node ---------------------------------------------


def daemon(**kw: Any) -> dict[str, Any]:
    return pod("p", priority=HIGH, cpu="2", owner="DaemonSet", node_affinity=pinned_to("b"), **kw)


DAEMON = [
    node("a", cpu="2"),
    node("b", cpu="2"),
    pod("cheap", priority=1, cpu="2", node="a"),
    pod("dear", priority=50, cpu="2", node="b"),
    daemon(),
]


@pytest.mark.parametrize(
    "policy",
    [
        DEFAULT,
        PreemptionPolicy(gang_aware_victims=True, victim_classes=True, qos_order=True),
        PreemptionPolicy(victim_selection=("single", "multiple")),
        PreemptionPolicy(pdb_mode="strict"),
    ],
)
def test_daemonset_pod_victims_only_on_its_node(policy: PreemptionPolicy) -> None:
    # the node filter (required node affinity) already keeps kube-scheduler's choice on b
    assert result(DAEMON, policy) == ("b", ["default/dear"])


def test_daemonset_pod_never_takes_a_group_beyond_its_node() -> None:
    objects = [
        podgroup("g", min_member=2, phase="Running"),
        node("a", cpu="2"),
        node("b", cpu="4"),
        pod("g1", priority=1, cpu="2", node="a", group="g"),
        pod("g2", priority=1, cpu="2", node="b", group="g"),
        pod("dear", priority=50, cpu="2", node="b"),
        daemon(),
    ]
    assert result(objects, DEFAULT) == ("b", ["default/g2"])  # breaks g
    # gang-aware, a single pod would take g whole (g1 on a too); a DaemonSet pod may not
    assert result(
        [*objects[:-1], pod("p", priority=HIGH, cpu="2", node_affinity=pinned_to("b"))],
        PreemptionPolicy(gang_aware_victims=True),
    ) == ("b", ["default/g1", "default/g2"])
    assert result(objects, PreemptionPolicy(gang_aware_victims=True)) == ("b", ["default/dear"])


# ---- 7. PDB mode ------------------------------------------------------------------------------

GUARDED = [
    node("a", cpu="2"),
    pod("guarded", priority=1, cpu="2", node="a", labels={"app": "guarded"}),
    pdb("guard", match_labels={"app": "guarded"}, allowed=0),
    pod("p", priority=HIGH, cpu="2"),
]


def test_pdb_strict_leaves_the_pod_pending() -> None:
    assert result(GUARDED, DEFAULT) == ("a", ["default/guarded"])
    found = result(GUARDED, PreemptionPolicy(pdb_mode="strict"))
    assert found.startswith("cannot preempt without violating a PodDisruptionBudget (--pdb-mode strict)"), (
        found
    )


def test_pdb_strict_spends_each_allowance_once_per_run() -> None:
    objects = [
        node("a", cpu="2"),
        node("b", cpu="2"),
        pod("g1", priority=1, cpu="2", node="a", labels={"app": "guarded"}),
        pod("g2", priority=1, cpu="2", node="b", labels={"app": "guarded"}),
        pdb("guard", match_labels={"app": "guarded"}, allowed=1),
        pod("p", priority=HIGH, cpu="2"),
        pod("q", priority=HIGH, cpu="2", created=1),
    ]
    assert decided(outcomes(objects)) == {
        "default/p": ("a", ["default/g1"]),
        "default/q": ("b", ["default/g2"]),
    }
    strict = outcomes(objects, policy=PreemptionPolicy(pdb_mode="strict"))
    assert decided(strict) == {"default/p": ("a", ["default/g1"])}
    assert "PodDisruptionBudget" in unresolved(strict)["default/q"]


def test_pdb_strict_takes_more_victims_rather_than_violate() -> None:
    objects = [
        node("a", cpu="4"),
        pod("guarded", priority=1, cpu="2", node="a", labels={"app": "guarded"}),
        pod("x1", priority=5, cpu="1", node="a"),
        pod("x2", priority=5, cpu="1", node="a"),
        pdb("guard", match_labels={"app": "guarded"}, allowed=0),
        pod("p", priority=HIGH, cpu="2"),
    ]
    # the PDB-violating pod is reprieved first in both modes: strict changes nothing here
    assert result(objects, DEFAULT) == ("a", ["default/x1", "default/x2"])
    assert result(objects, PreemptionPolicy(pdb_mode="strict")) == ("a", ["default/x1", "default/x2"])


def test_pdb_strict_for_a_gang() -> None:
    objects = [
        node("a", cpu="2"),
        node("b", cpu="2"),
        pod("g1", priority=1, cpu="2", node="a", labels={"app": "guarded"}),
        pod("g2", priority=1, cpu="2", node="b", labels={"app": "guarded"}),
        pdb("guard", match_labels={"app": "guarded"}, allowed=1),
        podgroup("gang", min_member=2, phase="Inqueue"),
        pod("m1", priority=HIGH, cpu="2", group="gang"),
        pod("m2", priority=HIGH, cpu="2", group="gang"),
    ]
    assert decided(outcomes(objects)) == {"podgroup:default/gang": (None, ["default/g1", "default/g2"])}
    strict = unresolved(outcomes(objects, policy=PreemptionPolicy(pdb_mode="strict")))
    assert strict["podgroup:default/gang"].startswith(
        "cannot preempt without violating a PodDisruptionBudget (--pdb-mode strict)"
    )


@pytest.mark.parametrize(
    ("objects", "policy", "expected"),
    [
        (
            CLOSEST,
            PreemptionPolicy(victim_selection=("single",), single_victim_deviation=60),
            {"a": "lost to b: its closest victim default/a1 deviates 50.0%", "b": "chosen"},
        ),
        (
            CLOSEST,
            PreemptionPolicy(victim_selection=("single",), single_victim_deviation=4),
            {
                "a": "under the policies: no single victim within --single-victim-deviation",
                "b": "under the policies: no single victim within --single-victim-deviation",
            },
        ),
        (
            GUARDED,
            PreemptionPolicy(pdb_mode="strict"),
            {"a": "under the policies: only by violating a PodDisruptionBudget (--pdb-mode strict)"},
        ),
    ],
    ids=["single", "single, none within", "strict"],
)
def test_explain_says_which_policy_decided(objects: list, policy: PreemptionPolicy, expected: dict) -> None:
    (outcome,) = outcomes(objects, policy=policy, explain=True)
    assert dict(outcome.nodes or {}) == expected
