"""The shortcuts that keep decisions fast on large clusters change no decision: each is
compared with the plain computation it replaces, on random clusters.

- gang: the critical heap lays out only nodes whose bounds reach its top (critical.py); the
  "fits as it is" search runs on the nodes some member may fit on (gang.possible_hosts);
  free space is computed per node on demand (space.FreeSpace); PDB violators are found per
  unit on demand (gang.Violations);
- topology spread: matching pods come from the label index, and nodes without matching or
  nominated pods are sorted out by domain (SpreadPlan.helpful).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from operator import itemgetter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption.critical import _Layout, _suffix_bound, critical_start
from priogate.preemption.engine import preemptors, prepare
from priogate.preemption.gang import Problem, _problem, possible_hosts, reprieve_order
from priogate.preemption.labels import build_label_index, label_index
from priogate.preemption.nodes import nominated_load
from priogate.preemption.packing import Packer
from priogate.preemption.reprieve import Taken
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption.spread_fit import SpreadPlan
from priogate.preemption.state import ClusterState
from priogate.preemption.table import screen_table
from tests.builders import node, pdb, pod, podgroup, priority_class

GANG = 10
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw: st.DrawFn) -> list[dict[str, Any]]:
    objects = [priority_class("gang-class", value=GANG)]
    jobs = [f"job{g}" for g in range(draw(st.integers(0, 2)))]
    objects += [podgroup(j, min_member=draw(st.integers(1, 2)), created=g) for g, j in enumerate(jobs)]
    names = [f"n{i}" for i in range(draw(st.integers(1, 9)))]
    for name in names:
        labels = {"kubernetes.io/hostname": name}
        if draw(st.integers(0, 6)):
            labels["zone"] = draw(st.sampled_from(["a", "b", "c"]))
        tainted = draw(st.integers(0, 6)) == 0
        objects.append(
            node(
                name,
                cpu=draw(st.sampled_from(["2", "3"])),
                pods=draw(st.sampled_from([6, 110, 110])),
                labels=labels,
                taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}] if tainted else None,
            )
        )
        for i in range(draw(st.integers(2, 6))):  # nodes mostly full: the gang needs victims
            kind = draw(st.sampled_from(["plain"] * 5 + ["group", "gang", "daemon", "terminating", "opted"]))
            labels = {"app": draw(st.sampled_from(["a", "b"]))}
            if kind == "opted":
                labels["priogate.io/allow-preemption"] = "false"
            group = {"group": draw(st.sampled_from(jobs))} if kind == "group" and jobs else {}
            objects.append(
                pod(
                    f"{name}-p{i}",
                    namespace=draw(st.sampled_from(["default", "default", "other"])),
                    priority=draw(st.sampled_from([0, 0, 1, 3, 5, 20])) if kind != "gang" else None,
                    priority_class="gang-class" if kind == "gang" else None,
                    cpu=draw(st.sampled_from(["500m", "750m", "1000m", "1500m"])),
                    node=name,
                    started=draw(st.integers(0, 9)),
                    labels=labels,
                    owner="DaemonSet" if kind == "daemon" else None,
                    deleting=kind == "terminating",
                    group="gang" if kind == "gang" else group.get("group"),
                )
            )
    for i in range(draw(st.integers(0, 3))):
        objects.append(
            pdb(
                f"pdb{i}",
                match_labels={"app": draw(st.sampled_from(["a", "b"]))},
                allowed=draw(st.integers(0, 2)),
                namespace=draw(st.sampled_from(["default", "other"])),
            )
        )
    size = draw(st.integers(1, 5))
    objects.append(podgroup("gang", min_member=size, priority_class="gang-class", created=9, phase="Inqueue"))
    shapes = draw(st.sampled_from([["1000m"], ["1500m"], ["2000m"], ["500m", "1500m"]]))
    for m in range(size):
        objects.append(
            pod(
                f"g{m}",
                cpu=shapes[m % len(shapes)],
                priority_class="gang-class",
                group="gang",
                created=m,
                tolerations=[{"key": "k", "operator": "Exists"}] if draw(st.booleans()) else None,
                nominated=draw(st.sampled_from([None, None, *names])),
            )
        )
    for i in range(draw(st.integers(0, 2))):  # pending pods holding their nominated nodes
        objects.append(
            pod(
                f"held{i}",
                priority=draw(st.sampled_from([5, 20])),
                cpu="500m",
                nominated=draw(st.sampled_from(names)),
            )
        )
    objects.append(spread_pod(draw))
    return objects


def spread_pod(draw: st.DrawFn) -> dict[str, Any]:
    constraints = []
    for key in draw(st.lists(st.sampled_from(["zone", "kubernetes.io/hostname"]), min_size=1, max_size=2)):
        selector = draw(
            st.sampled_from(
                [
                    {"matchLabels": {"app": "a"}},
                    {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]},
                    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["b"]}]},
                    {},
                ]
            )
        )
        constraint = {
            "maxSkew": draw(st.integers(1, 2)),
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
            "nodeTaintsPolicy": draw(st.sampled_from(["Honor", "Ignore"])),
        }
        if draw(st.booleans()):
            constraint["minDomains"] = draw(st.integers(1, 4))
        constraints.append(constraint)
    obj = pod(
        "spread",
        priority=GANG,
        cpu=draw(st.sampled_from(["500m", "1500m"])),
        labels={"app": draw(st.sampled_from(["a", "b"]))},
        node_selector={"zone": "a"} if draw(st.integers(0, 4)) == 0 else None,
        created=20,
    )
    obj["spec"]["topologySpreadConstraints"] = constraints
    return obj


def gang_problem(objects: list[dict[str, Any]]) -> tuple[ClusterState, Problem] | None:
    state = prepare(build_snapshot(objects))
    found = [p.gang for p in preemptors(state) if p.gang is not None]
    if not found:
        return None
    request = found[0]
    return state, _problem(state, request, request.pending[: request.needed])


@settings(SETTINGS, max_examples=300)
@given(clusters())
def test_the_critical_heap_finds_what_laying_out_every_node_finds(objects):
    found = gang_problem(objects)
    if found is None or len(found[1].classes) != 1:
        return
    state, problem = found
    index, order, _ = reprieve_order(state, problem, include_opted_out=False)
    member = problem.classes[0]
    thresholds, first = [], {}
    for name in member.nodes:
        layout = _Layout(index.per_node.get(name), order, problem.dims, problem.base[name])
        for count in range(1, len(member.members) + 1):
            threshold = layout.threshold([count * a for a in member.vector])
            first.setdefault(name, threshold)
            if threshold == -math.inf:
                break
            thresholds.append(threshold)
        rows = index.per_node.get(name)
        vec = member.vector
        if rows is not None and any(b < a for b, a in zip(problem.base[name], vec, strict=True)):
            assert _suffix_bound(rows, order, problem.dims, problem.base[name], vec) >= first[name]
    start = critical_start(index, order, member, problem.dims, problem.base)
    if len(thresholds) < len(member.members):
        assert start is None
        return
    cursor = sorted(thresholds, reverse=True)[len(member.members) - 1]
    assert start is not None and start.cursor == cursor
    assert sorted(start.free) == sorted(n for n, t in first.items() if t >= cursor)


def old_free_space(state: ClusterState, problem: Problem, own: frozenset[str]) -> tuple[dict, dict]:
    """`now` and `base` as dictionaries, computed for every node the way they were."""
    now, base = {}, {}
    pairs = tuple((d, 0) for d in problem.dims)
    for name, _, _, free_all, leaving, _, _ in state.rows:
        if name not in problem.nodes:
            continue
        free = tuple(free_all[d] for d in problem.dims)
        if name in state.nominated:
            held = nominated_load(state, name, problem.priority, own, pairs)
            free = tuple(f - h for f, h in zip(free, held, strict=True))
        now[name] = free
        if leaving is None:
            base[name] = free
        else:
            last, row = leaving.cum[len(leaving)], leaving.cum[leaving.below(problem.priority)]
            base[name] = tuple(f + last[d] - row[d] for f, d in zip(free, problem.dims, strict=True))
    return now, base


@SETTINGS
@given(clusters())
def test_free_space_on_demand_and_the_possible_hosts_change_nothing(objects):
    found = gang_problem(objects)
    if found is None:
        return
    state, problem = found
    now, base = old_free_space(state, problem, problem.now.own)
    assert dict(problem.now) == now and dict(problem.base) == base
    for space in (problem.now, problem.base):
        for cls in problem.classes:
            fitting = [
                n
                for n in problem.nodes
                if all(f >= a for f, a in zip(space[n], cls.vector, strict=True) if a > 0)
            ]
            assert set(fitting) <= set(space.candidates(cls.vector))
    everything = Packer(problem.classes).place(problem.nodes, now)
    assert Packer(problem.classes).place(possible_hosts(problem), problem.now) == everything


def old_violating(state: ClusterState, index: Any, r0: int, skip: int | None, nodes: set[str]) -> tuple:
    """Every PDB member walked in rank order, as before Violations."""
    pods, ranks = set(), set()
    for i, members in index.pdb_members.items():
        allowed = state.pdbs[i].disruptions_allowed
        for rank, p in members[bisect_left(members, r0, key=itemgetter(0)) :]:
            if rank == skip or p.node_name not in nodes:
                continue
            allowed -= 1
            if allowed < 0:
                pods.add(p.key)
                ranks.add(rank)
    return pods, ranks


@SETTINGS
@given(clusters(), st.booleans())
def test_violations_on_demand_equal_the_walk_over_every_pdb_member(objects, include_opted_out):
    found = gang_problem(objects)
    if found is None:
        return
    state, problem = found
    index, order, violations = reprieve_order(state, problem, include_opted_out=include_opted_out)
    pods, ranks = old_violating(state, index, order.r0, order.pinned, set(problem.nodes))
    assert {u.rank for u in index.units if violations.rank(u.rank)} == ranks
    for unit in index.units:
        assert violations.pods([Taken(unit, unit.pods, whole=True)]) == {p.key for p in unit.pods} & pods


@SETTINGS
@given(clusters())
def test_spread_plans_sort_nodes_out_as_asking_each_node_does(objects):
    state = prepare(build_snapshot(objects))
    complete = build_label_index(state.bound_pods())
    for namespace in ("default", "other", "absent"):
        assert label_index(state).namespace(namespace) == complete.namespace(namespace)
    spread = state.pods["default/spread"]
    table = screen_table(state, include_opted_out=False)
    plan = SpreadPlan(state, spread, table, spread.priority)
    everything = list(range(len(table.names)))
    asked = [i for i in everything if plan.can_help(i, table.nodes[i], table.ranked[i])]
    assert plan.helpful(everything) == asked
