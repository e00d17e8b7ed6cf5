"""Gang preemption and what kube-scheduler's InterPodAffinity and NodePorts filters demand:
the members' and the other pods' required (anti-)affinity and host ports, modelled where
exact (gang_fit.py) and refused otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from priogate.preemption.outcome import Outcome
from priogate.preemption.policy import PreemptionPolicy
from tests.builders import node, pod, podgroup, priority_class
from tests.unit.preemption.outcomes import group_outcome

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
GANG_LABELS = {"app": "gang"}


def term(labels: dict[str, str], key: str = HOST, **extra: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **extra}


def with_affinity(obj: dict, kind: str, *terms: dict[str, Any]) -> dict:
    obj["spec"].setdefault("affinity", {})[kind] = {
        "requiredDuringSchedulingIgnoredDuringExecution": list(terms)
    }
    return obj


def anti(obj: dict, *terms: dict[str, Any]) -> dict:
    return with_affinity(obj, "podAntiAffinity", *terms)


def needs(obj: dict, *terms: dict[str, Any]) -> dict:
    return with_affinity(obj, "podAffinity", *terms)


def port(obj: dict, number: int, ip: str | None = None, protocol: str | None = None) -> dict:
    entry: dict[str, Any] = {"containerPort": number, "hostPort": number}
    if ip:
        entry["hostIP"] = ip
    if protocol:
        entry["protocol"] = protocol
    obj["spec"]["containers"][0].setdefault("ports", []).append(entry)
    return obj


def gang(size: int, cpu: str = "1", shape=lambda p: p) -> list[dict]:
    objects = [
        priority_class("high", value=100),
        podgroup("gang", min_member=size, priority_class="high", phase="Inqueue"),
    ]
    for i in range(size):
        member = pod(f"g{i}", cpu=cpu, priority_class="high", group="gang", created=i, labels=GANG_LABELS)
        objects.append(shape(member))
    return objects


def decide(objects: list[dict], **options: Any) -> Outcome:
    return group_outcome(objects, "default/gang", **options)


def victims(outcome: Outcome) -> list[str]:
    return sorted(v.key for v in outcome.victims)


# ---- host ports ---------------------------------------------------------------------------------


def test_a_lower_priority_pod_holding_the_members_host_port_is_preempted():
    # Without the port, both members would fit on n2 (4 cpu free); with it, one per node.
    objects = [
        node("n1"),
        node("n2"),
        port(pod("holder", priority=1, cpu="1", node="n1"), 8080),
        *gang(2, shape=lambda p: port(p, 8080)),
    ]
    d = decide(objects)
    assert d.status == "preempt"
    assert victims(d) == ["default/holder"]
    assert sorted(d.placements.values()) == ["n1", "n2"]


@pytest.mark.parametrize(
    ("member", "holder", "conflict"),
    [
        ((None, None), (None, None), True),  # both 0.0.0.0/TCP
        (("10.0.0.1", None), (None, None), True),  # 0.0.0.0 covers every IP
        ((None, None), ("10.0.0.1", None), True),
        (("10.0.0.1", None), ("10.0.0.1", None), True),
        (("10.0.0.1", None), ("10.0.0.2", None), False),  # two IPs: no conflict
        ((None, "UDP"), (None, None), False),  # another protocol
        ((None, "UDP"), (None, "UDP"), True),
    ],
)
def test_host_port_conflicts_as_the_node_ports_filter(member, holder, conflict):
    objects = [
        node("n1", cpu="2"),
        port(pod("holder", priority=1, cpu="1", node="n1"), 8080, *holder),
        *gang(1, shape=lambda p: port(p, 8080, *member)),
    ]
    d = decide(objects)
    if conflict:
        assert (d.status, victims(d)) == ("preempt", ["default/holder"])
    else:
        assert d.status == "fits"


def test_a_host_port_held_by_a_more_important_pod_keeps_members_off_its_node():
    objects = [
        node("n1"),
        node("n2"),
        port(pod("holder", priority=500, cpu="1", node="n1"), 8080),
        *gang(2, shape=lambda p: port(p, 8080)),
    ]
    d = decide(objects)
    assert d.status == "unresolved"
    assert not d.refused


# ---- hostname anti-affinity ------------------------------------------------------------------


def test_members_that_exclude_each_other_spread_one_per_node():
    objects = [
        node("n1"),
        node("n2"),
        node("n3"),
        pod("low-a", priority=1, cpu="2", node="n3"),
        pod("low-b", priority=2, cpu="2", node="n3"),
        *gang(3, shape=lambda p: anti(p, term(GANG_LABELS))),
    ]
    d = decide(objects)
    assert d.status == "preempt"
    assert sorted(d.placements.values()) == ["n1", "n2", "n3"]
    assert victims(d) == [] or victims(d) == ["default/low-a"]
    # n3 has 0 cpu free: one victim (the lower priority one) makes room for one member.
    assert victims(d) == ["default/low-a"]


def test_a_lower_priority_pod_excluding_the_members_is_their_victim():
    objects = [
        node("n1"),
        node("n2"),
        anti(pod("loner", priority=1, cpu="1", node="n1", labels={"app": "loner"}), term(GANG_LABELS)),
        pod("big", priority=500, cpu="4", node="n2"),
        *gang(1),
    ]
    d = decide(objects)
    assert (d.status, victims(d), dict(d.placements)) == ("preempt", ["default/loner"], {"default/g0": "n1"})


def test_members_excluding_a_lower_priority_pod_take_it():
    objects = [
        node("n1"),
        node("n2"),
        pod("db", priority=1, cpu="1", node="n1", labels={"app": "db"}),
        pod("big", priority=500, cpu="4", node="n2"),
        *gang(1, shape=lambda p: anti(p, term({"app": "db"}))),
    ]
    d = decide(objects)
    assert (d.status, victims(d)) == ("preempt", ["default/db"])


def test_a_more_important_pod_excluding_the_members_blocks_its_node():
    objects = [
        node("n1"),
        node("n2"),
        anti(pod("loner", priority=500, cpu="1", node="n1", labels={"app": "loner"}), term(GANG_LABELS)),
        pod("big", priority=500, cpu="4", node="n2"),
        *gang(1),
    ]
    d = decide(objects)
    assert d.status == "unresolved"
    assert not d.refused


# ---- zone -----------------------------------------------------------------------------------------


def test_zone_anti_affinity_bars_the_zone_of_a_pod_that_stays():
    objects = [
        node("a1", labels={ZONE: "a"}),
        node("a2", labels={ZONE: "a"}),
        node("b1", labels={ZONE: "b"}),
        pod("db", priority=500, cpu="1", node="a1", labels={"app": "db"}),
        pod("low", priority=1, cpu="4", node="b1"),
        *gang(1, shape=lambda p: anti(p, term({"app": "db"}, ZONE))),
    ]
    d = decide(objects)
    assert (d.status, victims(d), dict(d.placements)) == ("preempt", ["default/low"], {"default/g0": "b1"})


@pytest.mark.parametrize("zones", [("a", "b"), ("a", "a", "b")])
def test_members_excluding_each_other_per_zone(zones):
    """With one node per zone the zone is a per-node key, modelled exactly; with a zone of
    several nodes, one member per zone is not a packing the engine does: refused."""
    objects = [node(f"n{i}", labels={ZONE: z}) for i, z in enumerate(zones)]
    objects += [pod(f"low{i}", priority=1, cpu="4", node=f"n{i}") for i in range(len(zones))]
    objects += gang(2, shape=lambda p: anti(p, term(GANG_LABELS, ZONE)))
    d = decide(objects)
    if len(zones) == 2:
        assert (d.status, sorted(d.placements.values())) == ("preempt", ["n0", "n1"])
    else:
        assert d.status == "unresolved"
        assert "one member per domain" in d.refused
        assert not d.victims


# ---- refusals ----------------------------------------------------------------------------------


def test_another_topology_key_is_refused_naming_the_member_and_the_key():
    objects = [
        node("n1"),
        pod("low", priority=1, cpu="4", node="n1"),
        *gang(1, shape=lambda p: anti(p, term({"app": "db"}, "example.com/rack"))),
    ]
    d = decide(objects)
    assert d.status == "unresolved"
    assert "default/g0" in d.refused and "example.com/rack" in d.refused
    assert d.reason.startswith("gang preemption refused")


@pytest.mark.parametrize(
    "term_of_the_pod",
    [
        term(GANG_LABELS, "example.com/rack"),  # a key the engine does not model
        term(GANG_LABELS, HOST, namespaceSelector={"matchLabels": {"team": "x"}}),  # Namespace labels
    ],
    ids=["other key", "namespaceSelector"],
)
def test_a_placed_pods_anti_affinity_the_engine_cannot_evaluate_bars_its_domain(term_of_the_pod):
    """Not a refusal: a pod another tenant runs must not stop the gang's decision. Its domain is
    left out, and the pod is never taken on a guess."""
    objects = [
        node("n1", labels={"example.com/rack": "r1"}),
        node("n2", labels={"example.com/rack": "r2"}),
        anti(pod("unsure", priority=1, cpu="1", node="n1"), term_of_the_pod),
        pod("low", priority=1, cpu="4", node="n2"),
        *gang(1),
    ]
    d = decide(objects, explain=True)
    assert (d.status, d.refused, victims(d)) == ("preempt", "", ["default/low"])
    assert dict(d.placements) == {"default/g0": "n2"}
    assert "may exclude it" in d.nodes["n1"]


def test_a_members_namespace_selector_needing_namespace_labels_is_refused():
    selector = {"namespaceSelector": {"matchLabels": {"team": "x"}}}
    objects = [
        node("n1"),
        pod("low", priority=1, cpu="4", node="n1", labels={"app": "any"}),
        *gang(1, shape=lambda p: anti(p, term({"app": "any"}, HOST, **selector))),
    ]
    d = decide(objects)
    assert "namespaceSelector" in d.refused and "default/g0" in d.refused


def test_an_empty_namespace_selector_means_every_namespace():
    objects = [
        node("n1"),
        node("n2"),
        anti(
            pod("loner", namespace="other", priority=1, cpu="1", node="n1"),
            term(GANG_LABELS, HOST, namespaceSelector={}),
        ),
        pod("big", priority=500, cpu="4", node="n2"),
        *gang(1),
    ]
    assert victims(decide(objects)) == ["other/loner"]


def test_a_term_of_another_namespace_does_not_select_the_members():
    objects = [
        node("n1", cpu="2"),
        anti(pod("loner", namespace="other", priority=1, cpu="1", node="n1"), term(GANG_LABELS)),
        *gang(1),
    ]
    assert decide(objects).status == "fits"


# ---- required affinity ------------------------------------------------------------------------


def test_required_affinity_places_members_beside_a_pod_that_stays():
    objects = [
        node("n1"),
        node("n2"),
        pod("cache", priority=500, cpu="1", node="n2", labels={"app": "cache"}),
        pod("low", priority=1, cpu="3", node="n2"),
        *gang(1, shape=lambda p: needs(p, term({"app": "cache"}))),
    ]
    d = decide(objects)
    assert (d.status, victims(d), dict(d.placements)) == ("preempt", ["default/low"], {"default/g0": "n2"})


def test_required_affinity_does_not_rely_on_a_possible_victim():
    objects = [
        node("n1"),
        pod("cache", priority=1, cpu="1", node="n1", labels={"app": "cache"}),
        pod("low", priority=1, cpu="3", node="n1"),
        *gang(1, shape=lambda p: needs(p, term({"app": "cache"}))),
    ]
    d = decide(objects)
    assert d.status == "unresolved" and not d.refused


def test_a_lone_member_matching_its_own_affinity_is_the_first_of_a_series():
    objects = [
        node("n1"),
        pod("low", priority=1, cpu="4", node="n1"),
        *gang(1, shape=lambda p: needs(p, term(GANG_LABELS))),
    ]
    assert victims(decide(objects)) == ["default/low"]


def test_members_required_to_co_locate_are_refused():
    objects = [
        node("n1"),
        pod("low", priority=1, cpu="4", node="n1"),
        *gang(2, shape=lambda p: needs(p, term(GANG_LABELS))),
    ]
    assert "co-location" in decide(objects).refused


# ---- the YuniKorn opt-out label ---------------------------------------------------------------


@pytest.mark.parametrize("label", ["priogate.io/allow-preemption", "yunikorn.apache.org/allow-preemption"])
@pytest.mark.parametrize("mode", ["hard", "soft"])
def test_both_opt_out_labels_protect_a_pod(label, mode):
    objects = [
        node("n1"),
        pod("o", priority=1, cpu="4", node="n1", labels={label: "False"}),
        *gang(1, cpu="4"),
    ]
    d = decide(objects, policy=PreemptionPolicy(opt_out_mode=mode))
    if mode == "hard":
        assert d.status == "unresolved"
    else:
        assert victims(d) == ["default/o"] and "opted-out pods included" in d.reason
