"""Property tests for gang preemption on small random clusters, checked by brute force.

For every decision: the placements fit once the victims are gone; victims all have lower
priority than the gang and may be victims at all; no victim PodGroup is left below its
minMember (it keeps minMember or goes whole); and the decision is 1-minimal: returning any
one victim unit (a single pod, a group's surplus member, or a whole group) leaves no way to
place every needed member. When the engine finds nothing, brute force confirms that even
removing every takable unit leaves no placement. The counting shortcut and the full walk
give the same answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption.engine import preemptors, simulate
from priogate.preemption.gang import _problem, solve
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption.state import build_state
from tests.builders import node, pdb, pod, podgroup, priority_class
from tests.unit.preemption.reference import DIMS, Node, Pod, static_ok

GANG_PRIORITY = 10
CPU = st.sampled_from(["500m", "1000m", "1000m", "1500m", "2000m"])


@st.composite
def gang_clusters(draw: st.DrawFn) -> list[dict]:
    objects = [priority_class("gang-class", value=GANG_PRIORITY)]
    names = [f"n{i}" for i in range(draw(st.integers(1, 4)))]
    groups = []
    for g in range(draw(st.integers(0, 2))):
        groups.append(f"job{g}")
        objects.append(podgroup(f"job{g}", min_member=draw(st.integers(1, 3)), created=g, phase="Inqueue"))
    for name in names:
        tainted = draw(st.integers(0, 5)) == 0
        objects.append(
            node(
                name,
                cpu=draw(st.sampled_from(["2000m", "2000m", "3000m", "4000m"])),
                pods=draw(st.sampled_from([3, 110])),
                taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}] if tainted else None,
            )
        )
        for i in range(draw(st.integers(1, 4))):
            kind = draw(st.sampled_from(["plain"] * 4 + ["group"] * 6 + ["daemon", "terminating", "opted"]))
            objects.append(
                pod(
                    f"{name}-p{i}",
                    priority=draw(st.sampled_from([0, 1, 3, 5, GANG_PRIORITY])),
                    cpu=draw(CPU),
                    node=name,
                    started=draw(st.integers(0, 9)),
                    labels={"app": draw(st.sampled_from(["a", "b"]))}
                    | ({"priogate.io/allow-preemption": "false"} if kind == "opted" else {}),
                    owner="DaemonSet" if kind == "daemon" else None,
                    deleting=kind == "terminating",
                    group=draw(st.sampled_from(groups)) if kind == "group" and groups else None,
                )
            )
    for i in range(draw(st.integers(0, 1))):
        objects.append(
            pdb(
                f"pdb{i}",
                match_labels={"app": draw(st.sampled_from(["a", "b"]))},
                allowed=draw(st.integers(0, 1)),
            )
        )
    size = draw(st.integers(1, 3))
    objects.append(podgroup("gang", min_member=size, priority_class="gang-class", created=9, phase="Inqueue"))
    shapes = draw(st.sampled_from([["1000m"], ["2000m"], ["1500m"], ["500m", "2000m"], ["2000m", "1000m"]]))
    for m in range(size):
        tolerate = draw(st.booleans())
        objects.append(
            pod(
                f"g{m}",
                cpu=shapes[m % len(shapes)],
                priority_class="gang-class",
                group="gang",
                created=m,
                tolerations=[{"key": "k", "operator": "Exists"}] if tolerate else None,
            )
        )
    return objects


class World:
    """The cluster from the raw objects, with nothing but plain loops."""

    def __init__(self, objects: list[dict]) -> None:
        self.nodes = {o["metadata"]["name"]: Node(o) for o in objects if o["kind"] == "Node"}
        self.pods = {p.key: p for p in (Pod(o) for o in objects if o["kind"] == "Pod")}
        self.group_of = {}
        for o in objects:
            if o["kind"] == "Pod":
                name = (o["metadata"].get("annotations") or {}).get("scheduling.k8s.io/group-name")
                self.group_of[f"default/{o['metadata']['name']}"] = f"default/{name}" if name else None
        self.min_member = {
            f"default/{o['metadata']['name']}": o["spec"]["minMember"]
            for o in objects
            if o["kind"] == "PodGroup"
        }
        self.members = [
            p for p in self.pods.values() if self.group_of[p.key] == "default/gang" and not p.node
        ]

    def counted(self, group: str) -> list[Pod]:
        return [
            p
            for p in self.pods.values()
            if self.group_of[p.key] == group
            and p.node
            and not p.terminating
            and p.phase not in ("Succeeded", "Failed")
        ]

    def free(self, removed: set[str]) -> dict[str, dict[str, int]]:
        free = {}
        for name, n in self.nodes.items():
            left = dict(n.alloc)
            for p in self.pods.values():
                leaving = p.terminating and p.priority < GANG_PRIORITY
                if (
                    p.node == name
                    and p.key not in removed
                    and not leaving
                    and p.phase not in ("Succeeded", "Failed")
                ):
                    for d in DIMS:
                        left[d] -= p.req[d]
            free[name] = left
        return free

    def placeable(self, removed: set[str]) -> bool:
        free = self.free(removed)
        names = sorted(self.nodes)
        for choice in itertools.product(names, repeat=len(self.members)):
            if self.holds(dict(zip((m.key for m in self.members), choice, strict=True)), free):
                return True
        return False

    def holds(self, placement: dict[str, str], free: dict[str, dict[str, int]]) -> bool:
        used = {n: dict.fromkeys(DIMS, 0) for n in self.nodes}
        for key, where in placement.items():
            member = self.pods[key]
            if not static_ok(member, self.nodes[where]):
                return False
            for d in DIMS:
                used[where][d] += member.req[d]
        return all(
            all(used[n][d] == 0 or used[n][d] <= free[n][d] for d in DIMS)
            for n in self.nodes
            if any(used[n].values())
        )

    def takable_units(self) -> Iterable[set[str]]:
        """Every unit the engine may take: lower-priority, possible victims, groups whole."""
        grouped: dict[str, list[Pod]] = {}
        for p in self.pods.values():
            if not p.node or p.terminating or p.phase in ("Succeeded", "Failed"):
                continue
            group = self.group_of[p.key]
            if group in self.min_member:
                grouped.setdefault(group, []).append(p)
            elif p.priority < GANG_PRIORITY and not p.protected and not p.opted_out:
                yield {p.key}
        for group, pods in grouped.items():
            if group != "default/gang" and all(
                p.priority < GANG_PRIORITY and not p.protected and not p.opted_out for p in pods
            ):
                yield {p.key for p in pods}


def gang_outcome(objects: list[dict]):
    result = simulate(build_snapshot(objects))
    return next(o for o in result.outcomes if o.preemptor == "podgroup:default/gang")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_clusters())
def test_gang_decisions_are_feasible_lower_priority_unbroken_and_minimal(objects):
    world = World(objects)
    outcome = gang_outcome(objects)
    if outcome.status == "fits":
        assert world.placeable(set())
        return
    if outcome.status == "unresolved":
        everything = set().union(*world.takable_units())
        assert not world.placeable(everything), outcome.reason
        return
    victims = {v.key for v in outcome.victims}
    assert sorted(outcome.placements) == sorted(m.key for m in world.members)
    assert world.holds(dict(outcome.placements), world.free(victims)), "placements fit once victims are gone"
    for key in victims:
        victim = world.pods[key]
        assert victim.priority < GANG_PRIORITY
        assert not victim.protected and not victim.terminating and not victim.opted_out
    units: list[set[str]] = []
    for group in {world.group_of[k] for k in victims} - {None}:
        counted = {p.key for p in world.counted(group)}
        taken = counted & victims
        assert len(counted) - len(taken) >= world.min_member[group] or taken == counted, group
        units.extend([taken] if taken == counted else [{k} for k in taken])
    units.extend({k} for k in victims if world.group_of[k] not in world.min_member)
    for unit in units:
        assert not world.placeable(victims - unit), f"returning {sorted(unit)} still leaves room"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_clusters())
def test_counting_shortcut_equals_the_full_walk(objects):
    state = build_state(build_snapshot(objects))
    found = [p for p in preemptors(state) if p.gang is not None]
    if not found:
        return
    request = found[0].gang
    problem = _problem(state, request, request.pending[: request.needed])
    fast = solve(state, problem, include_opted_out=False)
    walked = solve(state, problem, include_opted_out=False, walk_all=True)
    if isinstance(fast, str) or isinstance(walked, str):
        assert fast == walked
        return
    assert dict(fast.placement) == dict(walked.placement)
    assert [(t.unit.key, t.pods, t.whole) for t in fast.taken] == [
        (t.unit.key, t.pods, t.whole) for t in walked.taken
    ]
