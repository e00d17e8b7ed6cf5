"""One table per optional policy (priogate.preemption.policy): each row shows the outcome
with kube-scheduler's defaults and with the policy on, and they differ (or, where a row says
so, the policy keeps what the default already does)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from priogate.preemption.policy import PreemptionPolicy
from tests.builders import EPOCH, node, pdb, pod, podgroup, ts
from tests.unit.preemption.outcomes import decided, outcomes, unresolved

HIGH = 100
DEFAULT = PreemptionPolicy()


def owned_by(obj: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"kind": kind, "name": name, "apiVersion": "v1", "uid": "u"}]
    return obj


def guaranteed(name: str, cpu: str, **kw: Any) -> dict[str, Any]:
    return pod(name, limits={"cpu": cpu, "memory": "1Gi"}, **kw)


def unschedulable_since(obj: dict[str, Any], seconds: float) -> dict[str, Any]:
    obj.setdefault("status", {"phase": "Pending"})["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "lastTransitionTime": ts(seconds),
        }
    ]
    return obj


def pinned_to(name: str) -> list[dict[str, Any]]:
    """A DaemonSet pod's required node affinity (the DaemonSet controller's)."""
    return [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]


def result(objects: list[dict[str, Any]], policy: PreemptionPolicy, now: float | None = None) -> Any:
    found = outcomes(objects, policy=policy, now=now)
    return decided(found).get("default/p") or unresolved(found).get("default/p")


# ---- 1. gang-aware victims ---------------------------------------------------------------------

GANG = [
    podgroup("g", min_member=2, phase="Running"),
    node("a", cpu="4"),
    node("b", cpu="4"),
    pod("g1", priority=1, cpu="2", node="a", group="g"),
    pod("g2", priority=1, cpu="4", node="b", group="g"),
    pod("s", priority=5, cpu="2", node="a"),
    pod("p", priority=HIGH, cpu="2"),
]
SURPLUS = [
    podgroup("g", min_member=2, phase="Running"),
    node("a", cpu="4"),
    node("b", cpu="4"),
    pod("g1", priority=1, cpu="2", node="a", group="g"),
    pod("g2", priority=1, cpu="2", node="b", group="g"),
    pod("g3", priority=1, cpu="2", node="b", group="g"),
    pod("s", priority=5, cpu="2", node="a"),
    pod("p", priority=HIGH, cpu="2"),
]


@pytest.mark.parametrize(
    ("objects", "default", "gang_aware"),
    [
        # kube-scheduler takes g1 and leaves g with 1 of its minMember 2 placed; gang-aware,
        # g goes whole (its members on other nodes too), still cheaper than s (priority 5)
        (GANG, ("a", ["default/g1"]), ("a", ["default/g1", "default/g2"])),
        # g has one surplus member: taking g1 alone keeps minMember placed
        (SURPLUS, ("a", ["default/g1"]), ("a", ["default/g1"])),
    ],
    ids=["whole group", "surplus member"],
)
def test_gang_aware_victims(objects: list, default: tuple, gang_aware: tuple) -> None:
    assert result(objects, DEFAULT) == default
    assert result(objects, PreemptionPolicy(gang_aware_victims=True)) == gang_aware


def test_gang_aware_reason_names_the_policy() -> None:
    (outcome,) = [o for o in outcomes(GANG, policy=PreemptionPolicy(gang_aware_victims=True)) if o.victims]
    assert "policies: gang-aware victims" in outcome.reason


# ---- 2. victim classes ------------------------------------------------------------------------

DRIVER = [
    node("a", cpu="4"),
    node("b", cpu="4"),
    pod("driver", priority=1, cpu="2", node="a"),
    pod("regular", priority=3, cpu="2", node="a"),
    owned_by(pod("executor", priority=HIGH + 1, cpu="4", node="b"), "Pod", "driver"),
    pod("p", priority=HIGH, cpu="2"),
]


@pytest.mark.parametrize(
    ("objects", "default", "classes"),
    [
        # the driver has the lowest priority, but a regular pod goes before an owner
        (DRIVER, ("a", ["default/driver"]), ("a", ["default/regular"])),
        # an ownerReference of another kind does not make an owner
        (
            [*DRIVER[:4], owned_by(copy.deepcopy(DRIVER[4]), "ReplicaSet", "driver"), DRIVER[5]],
            ("a", ["default/driver"]),
            ("a", ["default/driver"]),
        ),
    ],
    ids=["driver pod last", "not an owner"],
)
def test_victim_classes(objects: list, default: tuple, classes: tuple) -> None:
    assert result(objects, DEFAULT) == default
    assert result(objects, PreemptionPolicy(victim_classes=True)) == classes


@pytest.mark.parametrize(
    ("policy", "cpu", "expected"),
    [
        (DEFAULT, "2", ["default/driver"]),
        (PreemptionPolicy(opt_out_mode="soft"), "2", ["default/driver"]),
        (PreemptionPolicy(victim_classes=True), "2", ["default/regular"]),
        (PreemptionPolicy(victim_classes=True, opt_out_mode="soft"), "2", ["default/regular"]),
        # regular, then owner/driver, then opted-out pods: the opted-out pod goes last
        (
            PreemptionPolicy(victim_classes=True, opt_out_mode="soft"),
            "4",
            ["default/regular", "default/driver"],
        ),
        (
            PreemptionPolicy(victim_classes=True, opt_out_mode="soft"),
            "6",
            ["default/regular", "default/driver", "default/opted"],
        ),
    ],
)
def test_victim_classes_in_the_seed_order(policy: PreemptionPolicy, cpu: str, expected: list[str]) -> None:
    objects = [
        node("a", cpu="6"),
        pod("driver", priority=1, cpu="2", node="a"),
        pod("regular", priority=3, cpu="2", node="a"),
        pod("opted", priority=0, cpu="2", node="a", labels={"priogate.io/allow-preemption": "false"}),
        owned_by(pod("executor", priority=HIGH + 1, cpu="0", node="a"), "Pod", "driver"),
        pod("p", priority=HIGH, cpu=cpu),
    ]
    assert result(objects, policy) == ("a", expected)


# ---- 3. QoS order -----------------------------------------------------------------------------

QOS = [
    node("a", cpu="4", pods=2),
    pod("best-effort", priority=1, node="a", started=0),
    guaranteed("guaranteed", "1", priority=1, node="a", started=10),
    pod("p", priority=HIGH, cpu="1"),
]
BURSTABLE = [
    node("a", cpu="4"),
    pod("burstable", priority=1, cpu="2", node="a", started=0),
    guaranteed("guaranteed", "2", priority=1, node="a", started=10),
    pod("p", priority=HIGH, cpu="2"),
]


@pytest.mark.parametrize(
    ("objects", "default", "qos"),
    [
        # equal priority: kube-scheduler takes the later-started pod; QoS order BestEffort first
        (QOS, ("a", ["default/guaranteed"]), ("a", ["default/best-effort"])),
        (BURSTABLE, ("a", ["default/guaranteed"]), ("a", ["default/burstable"])),
        # priority still comes first: a Guaranteed pod of lower priority goes before
        (
            [*BURSTABLE[:1], pod("burstable", priority=2, cpu="2", node="a"), *BURSTABLE[2:]],
            ("a", ["default/guaranteed"]),
            ("a", ["default/guaranteed"]),
        ),
    ],
    ids=["BestEffort before Guaranteed", "Burstable before Guaranteed", "priority first"],
)
def test_qos_order(objects: list, default: tuple, qos: tuple) -> None:
    assert result(objects, DEFAULT) == default
    assert result(objects, PreemptionPolicy(qos_order=True)) == qos


# ---- 4. start delay ---------------------------------------------------------------------------

NOW = EPOCH.timestamp() + 40
DELAYED = [
    node("a", cpu="2"),
    pod("v", priority=1, cpu="2", node="a"),
    unschedulable_since(pod("p", priority=HIGH, cpu="2", phase="Pending"), 30),
]


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (0.0, ("a", ["default/v"])),
        (5.0, ("a", ["default/v"])),  # unschedulable for 10 s already
        (30.0, "waiting for --preemption-start-delay 30s: unschedulable for 10s"),
    ],
)
def test_start_delay(delay: float, expected: Any) -> None:
    assert result(DELAYED, PreemptionPolicy(start_delay=delay), now=NOW) == expected


def test_start_delay_waits_for_a_pod_not_yet_marked_unschedulable() -> None:
    objects = [*DELAYED[:2], pod("p", priority=HIGH, cpu="2")]
    assert result(objects, DEFAULT) == ("a", ["default/v"])
    assert "not marked unschedulable" in result(objects, PreemptionPolicy(start_delay=1), now=NOW)


def test_start_delay_needs_now() -> None:
    with pytest.raises(ValueError, match="current time"):
        result(DELAYED, PreemptionPolicy(start_delay=1))


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
