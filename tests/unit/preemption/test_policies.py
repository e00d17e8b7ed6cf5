"""One table per optional policy (priogate.preemption.policy; the strategies, DaemonSet pods
and the PDB mode in test_policy_selection): each row shows the outcome
with kube-scheduler's defaults and with the policy on, and they differ (or, where a row says
so, the policy keeps what the default already does)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from priogate.preemption.policy import PreemptionPolicy
from tests.builders import EPOCH, node, pod, podgroup, ts
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


@pytest.mark.parametrize(
    ("pods", "default", "classes"),
    [
        # equal priority and start: kube-scheduler has no order (its sort is unstable), the
        # engine's default is the name; the YuniKorn order takes the smaller request first
        (
            [("a-small", 1, "1", 0), ("b-big", 1, "2", 0)],
            ["default/b-big"],
            ["default/a-small"],
        ),
        # age before resource: the younger (later start) goes first, whatever its size
        (
            [("a-small", 1, "1", 0), ("b-big", 1, "2", 5)],
            ["default/b-big"],
            ["default/b-big"],
        ),
        # priority before age and resource
        (
            [("a-small", 1, "1", 0), ("b-big", 0, "2", 0)],
            ["default/b-big"],
            ["default/b-big"],
        ),
    ],
    ids=["resource", "age", "priority"],
)
def test_victim_classes_order_priority_age_then_resource(pods: list, default: list, classes: list) -> None:
    objects = [
        node("a", cpu="4"),
        *(pod(name, priority=prio, cpu=cpu, node="a", started=start) for name, prio, cpu, start in pods),
        pod("p", priority=HIGH, cpu="2"),
    ]
    assert result(objects, DEFAULT) == ("a", default)
    assert result(objects, PreemptionPolicy(victim_classes=True)) == ("a", classes)


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
