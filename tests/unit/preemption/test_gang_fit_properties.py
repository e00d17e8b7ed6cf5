"""Gang decisions under host ports and required (anti-)affinity on small random clusters,
checked by brute force over every assignment of the members to nodes:

- "preempt": with the victims gone, every member fits its node by cpu; no pod that stays (nor
  another member) shares a conflicting host port with it on its node, or excludes it, or is
  excluded by it, through required anti-affinity in the same domain (kubernetes.io/hostname:
  the node; topology.kubernetes.io/zone: the node's zone); and its required affinity holds (a
  staying pod it selects in its domain, or none anywhere and the member selects itself):
  kube-scheduler's NodePorts and InterPodAffinity filters;
- "fits": some assignment satisfies all that with no victim;
- "unresolved", with only host ports and hostname anti-affinity drawn (the exact cases): not
  even removing every lower-priority pod leaves such an assignment. With zone terms or
  affinity the engine may be conservative (it neither clears a zone nor relies on a possible
  victim), and may refuse members that exclude each other per zone.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption.engine import decide_for_group
from priogate.preemption.snapshot import build_snapshot
from tests.builders import node, pod, podgroup, priority_class

GANG_PRIORITY = 10
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
PORTS = st.sampled_from([None, None, (80, None), (80, "10.0.0.1"), (80, "10.0.0.2"), (81, None)])
APPS = st.sampled_from(["a", "b", "g"])
TERMS = st.sampled_from([None, None, ("a", HOST), ("g", HOST), ("a", ZONE), ("g", ZONE)])
AFFINITY = st.sampled_from([None, None, None, ("a", HOST), ("a", ZONE), ("g", HOST)])


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _shape(obj: dict, fact: dict) -> dict:
    if fact["port"] is not None:
        entry: dict[str, Any] = {"containerPort": fact["port"][0], "hostPort": fact["port"][0]}
        if fact["port"][1]:
            entry["hostIP"] = fact["port"][1]
        obj["spec"]["containers"][0]["ports"] = [entry]
    affinity = {}
    if fact["anti"] is not None:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [_term(*fact["anti"])]
        }
    if fact.get("aff") is not None:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(*fact["aff"])]}
    if affinity:
        obj["spec"]["affinity"] = affinity
    return obj


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict], dict]:
    """The objects, and the facts: per node (cpu, zone), per pod its node, priority, cpu, app,
    port, anti-affinity and (members) affinity."""
    objects: list[dict] = [priority_class("high", value=GANG_PRIORITY)]
    facts: dict[str, dict] = {}
    nodes: dict[str, tuple[int, str]] = {}
    for n in range(draw(st.integers(1, 3))):
        name, cpu, zone = f"n{n}", draw(st.sampled_from([2, 3, 4])), draw(st.sampled_from(["za", "zb"]))
        nodes[name] = (cpu, zone)
        objects.append(node(name, cpu=str(cpu), labels={ZONE: zone}))
        for i in range(draw(st.integers(0, 3))):
            fact = {
                "node": name,
                "priority": draw(st.sampled_from([1, 5, GANG_PRIORITY, 50])),
                "cpu": draw(st.sampled_from([1, 2])),
                "app": draw(APPS),
                "port": draw(PORTS),
                "anti": draw(TERMS),
            }
            key = f"{name}-p{i}"
            facts[key] = fact
            made = pod(
                key, priority=fact["priority"], cpu=str(fact["cpu"]), node=name, labels={"app": fact["app"]}
            )
            objects.append(_shape(made, fact))
    size = draw(st.integers(1, 3))
    shared = {"port": draw(PORTS), "anti": draw(TERMS), "aff": draw(AFFINITY)}
    objects.append(podgroup("gang", min_member=size, priority_class="high", phase="Inqueue"))
    for i in range(size):
        key = f"g{i}"
        facts[key] = {"node": "", "priority": GANG_PRIORITY, "cpu": 1, "app": "g", **shared}
        member = pod(key, cpu="1", priority_class="high", group="gang", created=i, labels={"app": "g"})
        objects.append(_shape(member, facts[key]))
    return objects, {"nodes": nodes, "pods": facts}


def _domain(world: dict, node_name: str, key: str) -> str:
    return node_name if key == HOST else world["nodes"][node_name][1]


def _ports_clash(a: dict, b: dict) -> bool:
    if a["port"] is None or b["port"] is None or a["port"][0] != b["port"][0]:
        return False
    return a["port"][1] is None or b["port"][1] is None or a["port"][1] == b["port"][1]


def _excludes(world: dict, a: dict, a_node: str, b: dict, b_node: str) -> bool:
    """Do two pods on these nodes exclude each other by required anti-affinity?"""
    for owner, other in ((a, b), (b, a)):
        if owner["anti"] is not None:
            app, key = owner["anti"]
            if other["app"] == app and _domain(world, a_node, key) == _domain(world, b_node, key):
                return True
    return False


def _valid(world: dict, gone: set[str], placement: dict[str, str]) -> bool:
    pods = world["pods"]
    staying = {k: f for k, f in pods.items() if f["node"] and k not in gone}
    for name, (cpu, _) in world["nodes"].items():
        members = [m for m, n in placement.items() if n == name]
        if members and sum(f["cpu"] for f in staying.values() if f["node"] == name) + len(members) > cpu:
            return False
    placed = list(placement.items())
    for i, (m, at) in enumerate(placed):
        me = pods[m]
        for f in staying.values():
            if f["node"] == at and _ports_clash(me, f):
                return False
            if _excludes(world, me, at, f, f["node"]):
                return False
        for other, there in placed[i + 1 :]:
            if (at == there and _ports_clash(me, pods[other])) or _excludes(
                world, me, at, pods[other], there
            ):
                return False
        if me["aff"] is not None:
            app, key = me["aff"]
            matching = [f for f in staying.values() if f["app"] == app]
            beside = [f for f in matching if _domain(world, f["node"], key) == _domain(world, at, key)]
            if not beside and (matching or me["app"] != app):
                return False
    return True


def _any_valid(world: dict, gone: set[str], members: list[str]) -> bool:
    nodes = sorted(world["nodes"])
    return any(
        _valid(world, gone, dict(zip(members, choice, strict=True)))
        for choice in itertools.product(nodes, repeat=len(members))
    )


def _exact(world: dict) -> bool:
    """Only host ports and hostname anti-affinity drawn."""
    return all(
        (f["anti"] is None or f["anti"][1] == HOST) and f.get("aff") is None for f in world["pods"].values()
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_gang_decisions_respect_ports_and_pod_affinity(drawn):
    objects, world = drawn
    outcome = decide_for_group(build_snapshot(objects), "default/gang")
    members = sorted(k for k, f in world["pods"].items() if not f["node"])
    if outcome.refused:
        assert not _exact(world), outcome.refused
        assert not outcome.victims
        return
    if outcome.status == "preempt":
        gone = {v.name for v in outcome.victims}
        assert all(world["pods"][v]["priority"] < GANG_PRIORITY for v in gone)
        placement = {k.split("/", 1)[1]: n for k, n in outcome.placements.items()}
        assert sorted(placement) == members
        assert _valid(world, gone, placement)
    elif outcome.status == "fits":
        assert _any_valid(world, set(), members)
    elif _exact(world):
        takable = {k for k, f in world["pods"].items() if f["node"] and f["priority"] < GANG_PRIORITY}
        assert not _any_valid(world, takable, members), outcome.reason
