"""Preemption decision time on synthetic clusters: `python -m bench.preemption`.

Clusters of 500, 1,000 and 5,000 nodes with 30 pods each (a DaemonSet pod and 29 workload
pods in four priority classes, some in PodGroups, some under PDBs, a few tainted nodes),
nearly full, so every decision needs victims. Timed: one high-priority pod, and one PodGroup
needing 16 members at once, each the best of several runs on a prepared snapshot (building
the snapshot and its per-node aggregates is reported separately). Prints a table and, last,
`preemption: pod 5000 nodes X ms, gang 5000 nodes Y ms, growth 500->5000 Z x` (Z: the pod
decision), then `live: N events/s, event-to-decision X ms`.

The live part keeps a LiveClusterState of the largest cluster current from a realistic
event mix (a pod created pending, bound, its status updated, deleted; node heartbeats that
change nothing the engine reads) and reports the events it absorbs per second and the time
from one pod event to a decision that sees it (apply, refresh, decide). Figures, never
assertions. Progress goes to stderr.
"""

from __future__ import annotations

import copy
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from priogate.preemption.engine import decide_group, preemptors, prepare
from priogate.preemption.gang import preempt_group
from priogate.preemption.live import LiveClusterState
from priogate.preemption.outcome import Outcome
from priogate.preemption.policy import DEFAULT_POLICY
from priogate.preemption.single import preempt_pod
from priogate.preemption.snapshot import KINDS, build_snapshot
from priogate.preemption.state import ClusterState
from priogate.preemption.units import group_members, unit_index

SIZES = (500, 1000, 5000)
PODS_PER_NODE = 30
RUNS = 7
SEED = 20260101
PRIORITIES = ((0, 0.4), (100, 0.3), (1000, 0.2), (10000, 0.1))
PREEMPTOR_PRIORITY = 100000
LIVE_EVENTS = 30000  # the absorbed-rate run
LIVE_REFRESHED_EVENTS = 2000  # ... and the run refreshing the state after every event
CACHE_NAMES = dict(zip(KINDS, ("nodes", "pods", "podgroups", "pdbs", "classes"), strict=True))


def _iso(seconds: int) -> str:
    day, rest = divmod(seconds, 86400)
    return f"2026-01-{1 + day:02d}T{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}Z"


def _pod(name: str, ns: str, priority: int, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": extra.pop("labels", {})}
    meta.update(extra.pop("meta", {}))
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if "node" in extra:
        spec["nodeName"] = extra.pop("node")
        status = {"phase": "Running", "startTime": extra.pop("start")}
    meta.setdefault("creationTimestamp", _iso(0))
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def synthetic_cluster(nodes: int, seed: int = SEED) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objects: list[dict[str, Any]] = []
    namespaces = [f"team-{i}" for i in range(20)]
    apps = [(rng.choice(namespaces), f"app-{i}") for i in range(max(200, nodes // 5))]
    for ns, app in apps[::10]:
        objects.append(
            {
                "kind": "PodDisruptionBudget",
                "metadata": {"name": f"{app}-pdb", "namespace": ns},
                "spec": {"selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": rng.choice((0, 1))},
            }
        )
    groups = []
    for g in range(nodes // 25):  # victim gangs: 8 members spread over the cluster
        ns = rng.choice(namespaces)
        groups.append((ns, f"job-{g}"))
        objects.append(
            {
                "kind": "PodGroup",
                "metadata": {"name": f"job-{g}", "namespace": ns, "creationTimestamp": _iso(g)},
                "spec": {"minMember": 6},
                "status": {"phase": "Running"},
            }
        )
    group_slots = {
        (rng.randrange(nodes), rng.randrange(1, PODS_PER_NODE)): g
        for g in range(len(groups))
        for _ in range(8)
    }
    weights = [w for _, w in PRIORITIES]
    values = [p for p, _ in PRIORITIES]
    for n in range(nodes):
        name = f"node-{n:05d}"
        spec: dict[str, Any] = {}
        if n % 20 == 0:
            spec["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
        millis = [rng.choice((500, 750, 1000, 1500)) for _ in range(1, PODS_PER_NODE)]
        # Nearly full: 0 to 2 cores left, so a 4-core preemptor needs victims everywhere.
        allocatable = 100 + sum(millis) + rng.randrange(0, 2001, 250)
        objects.append(
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "zone": f"z{n % 4}"}},
                "spec": spec,
                "status": {"allocatable": {"cpu": f"{allocatable}m", "memory": "128Gi", "pods": "110"}},
            }
        )
        daemon = {
            "ownerReferences": [{"kind": "DaemonSet", "name": "agent", "uid": "ds", "apiVersion": "apps/v1"}]
        }
        objects.append(
            _pod(
                f"agent-{n}",
                "kube-system",
                2000001000,
                "100m",
                "128Mi",
                node=name,
                start=_iso(0),
                meta=daemon,
            )
        )
        for slot in range(1, PODS_PER_NODE):
            start = _iso(rng.randrange(30 * 86400))
            cpu = f"{millis[slot - 1]}m"
            memory = f"{rng.randrange(1, 5)}Gi"
            g = group_slots.get((n, slot))
            if g is not None:
                ns, job = groups[g]
                meta = {"annotations": {"scheduling.k8s.io/group-name": job}}
                objects.append(
                    _pod(f"{job}-{n}-{slot}", ns, 100, cpu, memory, node=name, start=start, meta=meta)
                )
                continue
            ns, app = rng.choice(apps)
            priority = rng.choices(values, weights)[0]
            labels = {"app": app}
            objects.append(
                _pod(f"{app}-{n}-{slot}", ns, priority, cpu, memory, node=name, start=start, labels=labels)
            )
    objects.append(
        _pod("urgent", "prod", PREEMPTOR_PRIORITY, "4", "8Gi", meta={"creationTimestamp": _iso(10)})
    )
    objects.append(
        {
            "kind": "PodGroup",
            "metadata": {"name": "training", "namespace": "prod", "creationTimestamp": _iso(5)},
            "spec": {"minMember": 16},
            "status": {"phase": "Inqueue"},
        }
    )
    for m in range(16):
        meta = {"annotations": {"scheduling.k8s.io/group-name": "training"}, "creationTimestamp": _iso(5)}
        objects.append(_pod(f"training-{m}", "prod", PREEMPTOR_PRIORITY, "4", "8Gi", meta=meta))
    return objects


def _best_of(runs: int, decide: Any) -> tuple[float, Outcome]:
    best, outcome = float("inf"), None
    for _ in range(runs):
        started = time.perf_counter()
        outcome = decide()
        best = min(best, time.perf_counter() - started)
    assert outcome is not None
    return best, outcome


def measure(nodes: int) -> dict[str, Any]:
    objects = synthetic_cluster(nodes)
    started = time.perf_counter()
    state: ClusterState = prepare(build_snapshot(objects))
    unit_index(state, include_opted_out=False)  # per-snapshot indexes the gang path uses
    group_members(state)
    build = time.perf_counter() - started
    # As `simulate` does: the long-lived snapshot is kept out of the collector's full scans.
    gc.freeze()
    found = preemptors(state)
    pod = next(p.pod for p in found if p.key == "prod/urgent")
    gang = next(p.gang for p in found if p.key == "podgroup:prod/training")
    assert pod is not None and gang is not None
    pod_s, pod_out = _best_of(RUNS, lambda: preempt_pod(state, pod, policy=DEFAULT_POLICY, explain=False))
    gang_s, gang_out = _best_of(
        RUNS, lambda: preempt_group(state, gang, policy=DEFAULT_POLICY, explain=False)
    )
    gc.unfreeze()
    for outcome in (pod_out, gang_out):
        if outcome.status != "preempt":
            raise SystemExit(
                f"bench cluster is wrong: {outcome.preemptor} got {outcome.status}: {outcome.reason}"
            )
    return {
        "nodes": nodes,
        "pods": len(state.pods),
        "build": build,
        "pod": pod_s,
        "pod_victims": len(pod_out.victims),
        "gang": gang_s,
        "gang_victims": len(gang_out.victims),
        "gang_nodes": len(set(gang_out.placements.values())),
    }


def churn(
    objects: list[dict[str, Any]], count: int, seed: int = SEED
) -> list[tuple[str, str, dict[str, Any]]]:
    """`count` watch events as a busy cluster sends them: per pod, created pending, bound,
    a status update the engine does not read, deleted; between them node heartbeats."""
    rng = random.Random(seed)
    nodes = [o for o in objects if o["kind"] == "Node"]
    values = [p for p, _ in PRIORITIES]
    events: list[tuple[str, str, dict[str, Any]]] = []
    i = 0
    while len(events) < count:
        name, priority, node = f"churn-{i}", rng.choice(values), rng.choice(nodes)
        i += 1
        pending = _pod(name, "churn", priority, "500m", "1Gi", labels={"app": "churn"})
        bound = _pod(name, "churn", priority, "500m", "1Gi", node=node["metadata"]["name"], start=_iso(9))
        ready = copy.deepcopy(bound)
        ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        events += [
            ("pods", "ADDED", pending),
            ("pods", "MODIFIED", bound),
            ("nodes", "MODIFIED", _heartbeat(node, i)),
            ("pods", "MODIFIED", ready),
            ("nodes", "MODIFIED", _heartbeat(rng.choice(nodes), i)),
            ("pods", "DELETED", ready),
        ]
    return events[:count]


def _heartbeat(node: dict[str, Any], beat: int) -> dict[str, Any]:
    status = {**node["status"], "conditions": [{"type": "Ready", "lastHeartbeatTime": _iso(beat)}]}
    return {**node, "status": status}


def _median_of(runs: int, prepare_run: Callable[[], None], timed: Callable[[], Any]) -> tuple[float, float]:
    """(median, best) of `runs` timings of `timed`, each after an untimed `prepare_run`."""
    times = []
    for _ in range(runs):
        prepare_run()
        started = time.perf_counter()
        timed()
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times)


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
    bind = _pod("probe", "churn", 0, "100m", "128Mi", node=node, start=_iso(9))
    pending = _pod("probe", "churn", 0, "100m", "128Mi")

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
    upkeep_s = _median_of(RUNS, unbind, bind_then_refresh)
    # The same decision with no event before it, in the same minutes: the machine is shared.
    alone_s = _median_of(
        RUNS,
        live.current,
        lambda: preempt_pod(live.current(), urgent, policy=DEFAULT_POLICY, explain=False),
    )
    pod_s = _median_of(RUNS, unbind, bind_then_pod_decision)
    gang_s = _median_of(RUNS, unbind, pending_then_gang_decision)
    gang_bind_s = _median_of(RUNS, unbind, bind_then_gang_decision)
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
        rows.append(measure(nodes))
        row = rows[-1]
        print(
            f"bench-preemption: {nodes} nodes: pod {row['pod'] * 1e3:.1f} ms, "
            f"gang {row['gang'] * 1e3:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
    print(f"decision time, best of {RUNS} runs (snapshot build excluded, shown separately)")
    print(
        f"{'nodes':>6} {'pods':>7} {'build s':>8} {'pod ms':>8} {'victims':>7} "
        f"{'gang ms':>8} {'victims':>7} {'on nodes':>8}"
    )
    for r in rows:
        print(
            f"{r['nodes']:>6} {r['pods']:>7} {r['build']:>8.2f} {r['pod'] * 1e3:>8.2f} {r['pod_victims']:>7} "
            f"{r['gang'] * 1e3:>8.2f} {r['gang_victims']:>7} {r['gang_nodes']:>8}"
        )
    nodes = SIZES[-1]
    print(f"bench-preemption: live state of {nodes} nodes ...", file=sys.stderr, flush=True)
    live = measure_live(nodes)
    print(
        f"live state at {live['nodes']} nodes / {live['pods']} pods (built once in {live['build']:.1f} s): "
        f"{live['absorbed']:.0f} events/s absorbed "
        "(pods created, bound, status updates, deleted; node heartbeats), "
        f"{live['refreshed']:.0f} events/s refreshing the state after each one"
    )
    print(f"event to decision, median (best) of {RUNS} runs, ms:")
    for label, key in (
        ("pod bound -> state refreshed, no decision", "upkeep"),
        ("no event -> pod decision", "alone"),
        ("pod bound -> pod decision", "pod"),
        ("pod created pending -> gang decision", "gang"),
        ("pod bound -> gang decision", "gang_bind"),
    ):
        median, best = live[key]
        print(f"  {label:<42} {median * 1e3:8.1f} ({best * 1e3:.1f})")
    first, last = rows[0], rows[-1]
    pod_growth = last["pod"] / first["pod"]
    gang_growth = last["gang"] / first["gang"]
    print(
        f"growth {first['nodes']}->{last['nodes']} nodes ({last['nodes'] / first['nodes']:.0f}x more): "
        f"pod {pod_growth:.1f} x, gang {gang_growth:.1f} x"
    )
    print(
        f"preemption: pod {last['nodes']} nodes {last['pod'] * 1e3:.1f} ms, "
        f"gang {last['nodes']} nodes {last['gang'] * 1e3:.1f} ms, "
        f"growth {first['nodes']}->{last['nodes']} {pod_growth:.1f} x, "
        f"live: {live['absorbed']:.0f} events/s, event-to-decision {live['pod'][0] * 1e3:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
