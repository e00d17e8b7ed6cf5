"""Preemption decision time on synthetic clusters: `python -m bench.preemption`.

Clusters of 500, 1,000 and 5,000 nodes with 30 pods each (a DaemonSet pod and 29 workload
pods in four priority classes, some in PodGroups, some under PDBs, a few tainted nodes),
nearly full, so every decision needs victims (bench.synthetic_cluster). Timed: one
high-priority pod, one with hard topology spread constraints, and one PodGroup needing 16
members at once, each over several runs on a prepared snapshot (building the snapshot and
its per-node aggregates is reported separately), wall clock and CPU time. Prints a table of
the best wall times, the 5,000-node figures in full and, last, `preemption: pod 5000 nodes
X ms, spread 5000 nodes S ms, gang 5000 nodes Y ms, growth 500->5000 Z x` (Z: the pod
decision), then `live: N events/s, event-to-decision X ms` (median).

The live part keeps a LiveClusterState of the largest cluster current from a realistic
event mix (a pod created pending, bound, its status updated, deleted; node heartbeats that
change nothing the engine reads) and reports the events it absorbs per second and the time
from one pod event to a decision that sees it (apply, refresh, decide). Figures, never
assertions. Progress goes to stderr.
"""

from __future__ import annotations

import gc
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.synthetic_cluster import PODS_PER_NODE, churn, iso, pod, synthetic_cluster
from priogate.preemption.engine import decide_group, preemptors, prepare
from priogate.preemption.gang import preempt_group
from priogate.preemption.labels import label_index
from priogate.preemption.live import LiveClusterState
from priogate.preemption.policy import DEFAULT_POLICY
from priogate.preemption.single import preempt_pod
from priogate.preemption.snapshot import KINDS, build_snapshot
from priogate.preemption.state import ClusterState
from priogate.preemption.units import group_members, unit_index

SIZES = (500, 1000, 5000)
RUNS = 7
LIVE_EVENTS = 30000  # the absorbed-rate run
LIVE_REFRESHED_EVENTS = 2000  # ... and the run refreshing the state after every event
CACHE_NAMES = dict(zip(KINDS, ("nodes", "pods", "podgroups", "pdbs", "classes"), strict=True))


@dataclass(frozen=True)
class Timing:
    """Seconds over several runs: wall clock and this thread's CPU time, each best and median
    (the machine is shared: CPU time is what the code costs, wall what a caller waits)."""

    wall: list[float]
    cpu: list[float]

    @property
    def best(self) -> float:
        return min(self.wall)

    def text(self) -> str:
        wall, cpu = self.wall, self.cpu
        return (
            f"wall {min(wall) * 1e3:.1f} ms best, {statistics.median(wall) * 1e3:.1f} median; "
            f"CPU {min(cpu) * 1e3:.1f} best, {statistics.median(cpu) * 1e3:.1f} median"
        )


def timed(runs: int, prepare_run: Callable[[], Any], run: Callable[[], Any]) -> tuple[Timing, Any]:
    """`runs` timings of `run`, each after an untimed `prepare_run`; and run's last result."""
    wall, cpu, result = [], [], None
    for _ in range(runs):
        prepare_run()
        started, started_cpu = time.perf_counter(), time.thread_time()
        result = run()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return Timing(wall, cpu), result


def isolated(measure_one: Callable[[int], dict[str, Any]], nodes: int) -> dict[str, Any]:
    """`measure_one(nodes)` in a fresh process: a cluster built in memory that the smaller
    ones before it left fragmented was measured up to 1.6x slower than the same cluster
    alone, for every decision alike."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(measure_one, nodes).result()


def _nothing() -> None:
    return None


DECISIONS = (("pod", "prod/urgent"), ("spread", "/spread"), ("gang", "podgroup:prod/training"))


def measure(nodes: int) -> dict[str, Any]:
    objects = synthetic_cluster(nodes)
    started = time.perf_counter()
    state: ClusterState = prepare(build_snapshot(objects))
    unit_index(state, include_opted_out=False)  # per-snapshot indexes the gang path uses
    group_members(state)
    found = {p.key: p for p in preemptors(state)}
    spread = next(p.pod for k, p in found.items() if k.endswith("/spread"))
    assert spread is not None
    label_index(state).namespace(spread.namespace)  # ... and the spread path (labels.py)
    build = time.perf_counter() - started
    # As `simulate` does: the long-lived snapshot is kept out of the collector's full scans.
    gc.freeze()
    row: dict[str, Any] = {"nodes": nodes, "pods": len(state.pods), "build": build}
    for name, key in DECISIONS:
        preemptor = next(p for k, p in found.items() if k.endswith(key))
        single, gang = preemptor.pod, preemptor.gang
        if single is not None:
            row[name], outcome = timed(
                RUNS, _nothing, lambda p=single: preempt_pod(state, p, policy=DEFAULT_POLICY, explain=False)
            )
        else:
            assert gang is not None
            row[name], outcome = timed(
                RUNS, _nothing, lambda g=gang: preempt_group(state, g, policy=DEFAULT_POLICY, explain=False)
            )
        if outcome.status != "preempt":
            raise SystemExit(f"bench cluster is wrong: {key} got {outcome.status}: {outcome.reason}")
        row[f"{name}_victims"] = len(outcome.victims)
        row[f"{name}_nodes"] = len(set(outcome.placements.values()))
    gc.unfreeze()
    return row


def measure_live(nodes: int) -> dict[str, Any]:
    objects = synthetic_cluster(nodes)
    by_kind: dict[str, list[dict[str, Any]]] = {name: [] for name in CACHE_NAMES.values()}
    for obj in objects:
        by_kind[CACHE_NAMES[obj["kind"]]].append(obj)
    started = time.perf_counter()
    live = LiveClusterState(
        nodes=by_kind["nodes"],
        pods=by_kind["pods"],
        podgroups=by_kind["podgroups"],
        pdbs=by_kind["pdbs"],
        priority_classes=by_kind["classes"],
    )
    state = live.current()
    unit_index(state, include_opted_out=False)
    build = time.perf_counter() - started
    gc.freeze()
    events = churn(objects, LIVE_EVENTS)
    started = time.perf_counter()
    for event in events:
        live.apply(*event)
    absorbed = len(events) / (time.perf_counter() - started)
    live.current()
    refreshed_events = events[:LIVE_REFRESHED_EVENTS]
    started = time.perf_counter()
    for event in refreshed_events:
        live.apply(*event)
        live.current()
    refreshed = len(refreshed_events) / (time.perf_counter() - started)

    # One bind (a node's pods change), then a decision that must see it.
    node = by_kind["nodes"][0]["metadata"]["name"]
    bind = pod("probe", "churn", 0, "100m", "128Mi", node=node, start=iso(9))
    pending = pod("probe", "churn", 0, "100m", "128Mi")

    def unbind() -> None:
        live.apply("pods", "DELETED", bind)
        live.current()

    def bind_then_pod_decision() -> None:
        live.apply("pods", "ADDED", bind)
        state = live.current()
        preempt_pod(state, state.pods["prod/urgent"], policy=DEFAULT_POLICY, explain=False)

    urgent = live.current().pods["prod/urgent"]

    def bind_then_refresh() -> None:
        live.apply("pods", "ADDED", bind)
        live.current()

    def pending_then_gang_decision() -> None:
        live.apply("pods", "ADDED", pending)
        decide_group(live.current(), "prod/training")

    def bind_then_gang_decision() -> None:
        live.apply("pods", "ADDED", bind)
        decide_group(live.current(), "prod/training")

    decide_group(live.current(), "prod/training")  # the unit index, as a running controller has it
    upkeep_s, _ = timed(RUNS, unbind, bind_then_refresh)
    # The same decision with no event before it, in the same minutes: the machine is shared.
    alone_s, _ = timed(
        RUNS,
        live.current,
        lambda: preempt_pod(live.current(), urgent, policy=DEFAULT_POLICY, explain=False),
    )
    pod_s, _ = timed(RUNS, unbind, bind_then_pod_decision)
    gang_s, _ = timed(RUNS, unbind, pending_then_gang_decision)
    gang_bind_s, _ = timed(RUNS, unbind, bind_then_gang_decision)
    gc.unfreeze()
    return {
        "nodes": nodes,
        "pods": len(live.current().pods),
        "build": build,
        "absorbed": absorbed,
        "refreshed": refreshed,
        "upkeep": upkeep_s,
        "alone": alone_s,
        "pod": pod_s,
        "gang": gang_s,
        "gang_bind": gang_bind_s,
    }


def main() -> int:
    rows = []
    for nodes in SIZES:
        print(
            f"bench-preemption: building {nodes} nodes x {PODS_PER_NODE} pods ...",
            file=sys.stderr,
            flush=True,
        )
        rows.append(isolated(measure, nodes))
        row = rows[-1]
        figures = ", ".join(f"{name} {row[name].best * 1e3:.1f} ms" for name, _ in DECISIONS)
        print(f"bench-preemption: {nodes} nodes: {figures}", file=sys.stderr, flush=True)
    print(f"decision time, best of {RUNS} runs, wall (snapshot build excluded, shown separately)")
    print(
        f"{'nodes':>6} {'pods':>7} {'build s':>8} {'pod ms':>8} {'victims':>7} "
        f"{'spread ms':>9} {'victims':>7} "
        f"{'gang ms':>8} {'victims':>7} {'on nodes':>8}"
    )
    for r in rows:
        print(
            f"{r['nodes']:>6} {r['pods']:>7} {r['build']:>8.2f} "
            f"{r['pod'].best * 1e3:>8.2f} {r['pod_victims']:>7} "
            f"{r['spread'].best * 1e3:>9.2f} {r['spread_victims']:>7} "
            f"{r['gang'].best * 1e3:>8.2f} {r['gang_victims']:>7} {r['gang_nodes']:>8}"
        )
    last = rows[-1]
    print(f"at {last['nodes']} nodes, {RUNS} runs each:")
    for name, label in (
        ("pod", "one high-priority pod"),
        ("spread", "a pod with hard topology spread (zone, hostname)"),
        ("gang", "a 16-member PodGroup"),
    ):
        print(f"  {label:<50} {last[name].text()}")
    nodes = SIZES[-1]
    print(f"bench-preemption: live state of {nodes} nodes ...", file=sys.stderr, flush=True)
    live = isolated(measure_live, nodes)
    print(
        f"live state at {live['nodes']} nodes / {live['pods']} pods (built once in {live['build']:.1f} s): "
        f"{live['absorbed']:.0f} events/s absorbed "
        "(pods created, bound, status updates, deleted; node heartbeats), "
        f"{live['refreshed']:.0f} events/s refreshing the state after each one"
    )
    print(f"event to decision, {RUNS} runs:")
    for label, key in (
        ("pod bound -> state refreshed, no decision", "upkeep"),
        ("no event -> pod decision", "alone"),
        ("pod bound -> pod decision", "pod"),
        ("pod created pending -> gang decision", "gang"),
        ("pod bound -> gang decision", "gang_bind"),
    ):
        print(f"  {label:<42} {live[key].text()}")
    first = rows[0]
    pod_growth = last["pod"].best / first["pod"].best
    gang_growth = last["gang"].best / first["gang"].best
    print(
        f"growth {first['nodes']}->{last['nodes']} nodes ({last['nodes'] / first['nodes']:.0f}x more): "
        f"pod {pod_growth:.1f} x, gang {gang_growth:.1f} x"
    )
    live_pod = statistics.median(live["pod"].wall)
    print(
        f"preemption: pod {last['nodes']} nodes {last['pod'].best * 1e3:.1f} ms, "
        f"spread {last['nodes']} nodes {last['spread'].best * 1e3:.1f} ms, "
        f"gang {last['nodes']} nodes {last['gang'].best * 1e3:.1f} ms, "
        f"growth {first['nodes']}->{last['nodes']} {pod_growth:.1f} x, "
        f"live: {live['absorbed']:.0f} events/s, event-to-decision {live_pod * 1e3:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
