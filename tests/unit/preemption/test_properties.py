"""Property tests on small random clusters.

Single pods: the engine's decisions equal the naive reference implementation's (reference.py),
in both opt-out modes, and --explain's exhaustive evaluation picks the same nodes as the
bounded best-first search.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption.engine import preemptors, simulate
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.single import preempt_pod
from priogate.preemption.snapshot import build_snapshot
from priogate.preemption.state import apply_decision, build_state
from priogate.preemption.table import ScreenTable, carry_tables, screen_table
from tests.builders import node, pdb, pod
from tests.unit.preemption import reference

SOFT = PreemptionPolicy(opt_out_mode="soft")

PRIORITIES = st.sampled_from([0, 0, 1, 2, 5, 10])  # repeated values make node-order ties
CPU = st.sampled_from(["250m", "500m", "1000m", "1000m", "1500m", "2000m"])
MEMORY = st.sampled_from([None, "512Mi", "1Gi", "2Gi"])
START = st.one_of(st.none(), st.integers(0, 50))
APP = st.sampled_from(["a", "b", "c"])


@st.composite
def clusters(draw: st.DrawFn) -> list[dict]:
    objects = []
    names = [f"n{i}" for i in range(draw(st.integers(1, 4)))]
    for name in names:
        taint = draw(st.sampled_from([None] * 6 + ["NoSchedule", "NoExecute"]))
        objects.append(
            node(
                name,
                cpu=draw(st.sampled_from(["2000m", "3000m", "4000m"])),
                memory=draw(st.sampled_from(["4Gi", "8Gi"])),
                pods=draw(st.sampled_from([3, 4, 110])),
                labels={"zone": draw(st.sampled_from(["a", "b"]))},
                taints=[{"key": "dedicated", "value": "x", "effect": taint}] if taint else None,
                unschedulable=draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()),
            )
        )
        for i in range(draw(st.integers(1, 6))):
            kind = draw(st.sampled_from(["plain"] * 8 + ["daemon", "mirror", "terminating", "done", "opted"]))
            objects.append(
                pod(
                    f"{name}-p{i}",
                    priority=draw(PRIORITIES),
                    cpu=draw(CPU),
                    memory=draw(MEMORY),
                    node=name,
                    started=draw(START),
                    labels={"app": draw(APP)}
                    | ({"priogate.io/allow-preemption": "false"} if kind == "opted" else {}),
                    owner="DaemonSet" if kind == "daemon" else None,
                    annotations={"kubernetes.io/config.mirror": "x"} if kind == "mirror" else None,
                    deleting=kind == "terminating",
                    preempted=kind == "terminating" and draw(st.booleans()),
                    phase="Succeeded" if kind == "done" else None,
                )
            )
    for i in range(draw(st.integers(0, 2))):
        objects.append(pdb(f"pdb{i}", match_labels={"app": draw(APP)}, allowed=draw(st.integers(0, 1))))
    for i in range(draw(st.integers(1, 3))):
        objects.append(
            pod(
                f"pending{i}",
                priority=draw(st.sampled_from([1, 3, 6, 10, 12, 12])),
                cpu=draw(CPU),
                memory=draw(MEMORY),
                created=draw(st.integers(0, 3)),
                node_selector={"zone": "a"} if draw(st.integers(0, 4)) == 0 else None,
                tolerations=[{"key": "dedicated", "operator": "Exists"}] if draw(st.booleans()) else None,
                preemption_policy="Never" if draw(st.integers(0, 11)) == 0 else None,
                nominated=draw(st.sampled_from([None, None, *names])),
            )
        )
    return objects


def engine(objects: list[dict], mode: str, explain: bool = False) -> list[tuple]:
    result = simulate(build_snapshot(objects), policy=PreemptionPolicy(opt_out_mode=mode), explain=explain)
    out = []
    for o in result.outcomes:
        if o.status == "preempt":
            out.append((o.preemptor, "preempt", o.node, [v.key for v in o.victims]))
        elif o.status == "unresolved":
            out.append((o.preemptor, "unresolved"))
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from(["hard", "soft"]))
def test_single_pod_decisions_equal_the_reference(objects, mode):
    assert engine(objects, mode) == reference.simulate(objects, mode)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_exhaustive_evaluation_agrees_with_bounded_search(objects):
    assert engine(objects, "hard", explain=True) == engine(objects, "hard")


def _columns(table: ScreenTable, probes: set[int]) -> tuple:
    # A patched table may keep a priority level no pod has any more: harmless, so levels are
    # compared through what they answer, removable(P), at every level and just above it.
    cuts = tuple(tuple(map(list, table.removable(p))) for p in sorted(probes))
    return (
        table.names,
        [n.name for n in table.nodes],
        tuple(map(list, table.free)),
        tuple(map(list, table.largest)),
        tuple(map(list, table.pivot_priority)),
        tuple(map(list, table.pivot_start)),
        tuple(map(list, table.tail_priority)),
        table.leaving,
        table.restricted,
        cuts,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_tables_patched_after_a_decision_equal_rebuilt_ones(objects, include_opted_out):
    state = build_state(build_snapshot(objects))
    screen_table(state, include_opted_out=include_opted_out)
    for preemptor in preemptors(state):
        if preemptor.pod is None:
            continue
        outcome = preempt_pod(state, state.pods[preemptor.key], policy=SOFT, explain=False)
        if outcome.status != "preempt":
            continue
        after = apply_decision(
            state, [v.key for v in outcome.victims], outcome.placements, outcome.clear_below
        )
        carry_tables(state, after, {v.node_name for v in outcome.victims} | set(outcome.placements.values()))
        patched = screen_table(after, include_opted_out=include_opted_out)
        rebuilt = ScreenTable(after, include_opted_out)
        probes = {p + delta for p in (*patched.levels, *rebuilt.levels) for delta in (0, 1)}
        assert _columns(patched, probes) == _columns(rebuilt, probes)
        return
