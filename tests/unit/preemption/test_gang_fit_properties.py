"""Gang decisions under host ports and hostname anti-affinity on small random clusters,
checked by brute force over every assignment of the members to nodes:

- "preempt": with the victims gone, every member fits its node by cpu, and no pod that stays
  there (nor another member there) shares a conflicting host port with it or excludes it, or
  is excluded by it, through required anti-affinity (kube-scheduler's NodePorts and
  InterPodAffinity filters);
- "fits": some assignment satisfies all that with no victim;
- "unresolved": not even removing every lower-priority pod leaves such an assignment.
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
PORTS = st.sampled_from([None, None, (80, None), (80, "10.0.0.1"), (80, "10.0.0.2"), (81, None)])
APPS = st.sampled_from(["a", "b", "g"])
ANTI = st.sampled_from([None, None, "a", "g"])


def _shape(obj: dict, port: tuple[int, str | None] | None, anti: str | None) -> dict:
    if port is not None:
        entry: dict[str, Any] = {"containerPort": port[0], "hostPort": port[0]}
        if port[1]:
            entry["hostIP"] = port[1]
        obj["spec"]["containers"][0]["ports"] = [entry]
    if anti is not None:
        term = {"labelSelector": {"matchLabels": {"app": anti}}, "topologyKey": HOST}
        obj["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    return obj


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict], dict[str, dict]]:
    """The objects, and per pod name its (node, priority, cpu, app, port, anti) facts."""
    objects: list[dict] = [priority_class("high", value=GANG_PRIORITY)]
    facts: dict[str, dict] = {}
    nodes = {f"n{i}": draw(st.sampled_from([2, 3, 4])) for i in range(draw(st.integers(1, 3)))}
    for name, cpu in nodes.items():
        objects.append(node(name, cpu=str(cpu)))
        for i in range(draw(st.integers(0, 3))):
            fact = {
                "node": name,
                "priority": draw(st.sampled_from([1, 5, GANG_PRIORITY, 50])),
                "cpu": draw(st.sampled_from([1, 2])),
                "app": draw(APPS),
                "port": draw(PORTS),
                "anti": draw(ANTI),
            }
            key = f"{name}-p{i}"
            facts[key] = fact
            made = pod(
                key, priority=fact["priority"], cpu=str(fact["cpu"]), node=name, labels={"app": fact["app"]}
            )
            objects.append(_shape(made, fact["port"], fact["anti"]))
    size = draw(st.integers(1, 3))
    port, anti = draw(PORTS), draw(ANTI)
    objects.append(podgroup("gang", min_member=size, priority_class="high", phase="Inqueue"))
    for i in range(size):
        key = f"g{i}"
        facts[key] = {"node": "", "priority": GANG_PRIORITY, "cpu": 1, "app": "g", "port": port, "anti": anti}
        member = pod(key, cpu="1", priority_class="high", group="gang", created=i, labels={"app": "g"})
        objects.append(_shape(member, port, anti))
    return objects, {"nodes": nodes, "pods": facts}


def _ports_clash(a: dict, b: dict) -> bool:
    if a["port"] is None or b["port"] is None or a["port"][0] != b["port"][0]:
        return False
    return a["port"][1] is None or b["port"][1] is None or a["port"][1] == b["port"][1]


def _clash(a: dict, b: dict) -> bool:
    return _ports_clash(a, b) or a["anti"] == b["app"] or b["anti"] == a["app"]


def _valid(world: dict, gone: set[str], placement: dict[str, str]) -> bool:
    pods = world["pods"]
    for name, cpu in world["nodes"].items():
        here = [k for k, f in pods.items() if f["node"] == name and k not in gone]
        members = [m for m, n in placement.items() if n == name]
        if not members:
            continue  # an overcommitted node no member uses is no concern
        if sum(pods[k]["cpu"] for k in here) + len(members) > cpu:
            return False
        for i, m in enumerate(members):
            if any(_clash(pods[m], pods[k]) for k in here):
                return False
            if any(_clash(pods[m], pods[o]) for o in members[i + 1 :]):
                return False
    return True


def _any_valid(world: dict, gone: set[str], members: list[str]) -> bool:
    nodes = sorted(world["nodes"])
    return any(
        _valid(world, gone, dict(zip(members, choice, strict=True)))
        for choice in itertools.product(nodes, repeat=len(members))
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_gang_decisions_respect_ports_and_anti_affinity(drawn):
    objects, world = drawn
    outcome = decide_for_group(build_snapshot(objects), "default/gang")
    members = sorted(k for k, f in world["pods"].items() if not f["node"])
    assert not outcome.refused  # hostname terms and ports only: all modelled
    if outcome.status == "preempt":
        gone = {v.name for v in outcome.victims}
        assert all(world["pods"][v]["priority"] < GANG_PRIORITY for v in gone)
        placement = {k.split("/", 1)[1]: n for k, n in outcome.placements.items()}
        assert sorted(placement) == members
        assert _valid(world, gone, placement)
    elif outcome.status == "fits":
        assert _any_valid(world, set(), members)
    else:
        takable = {k for k, f in world["pods"].items() if f["node"] and f["priority"] < GANG_PRIORITY}
        assert not _any_valid(world, takable, members), outcome.reason
