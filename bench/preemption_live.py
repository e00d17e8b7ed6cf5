"""`make bench-preemption-live`: a high-priority pod's creation to its binding, when every node
is full and the pod must preempt, with kube-scheduler's preemption shaped by priogate's preempt
extender against kube-scheduler's preemption alone.

One run, two local control planes side by side (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok, the priogate webhook and controller each): one in the default mode
(kube-scheduler's DefaultPreemption preempts), one in the preemptor mode (DefaultPreemption with
the extender, manifests/scheduler/, the controller serving it with --pod-preemption). Both get
the same cluster (N kwok nodes of 1 CPU), the same pods and the same pacing, interleaved: both
clusters run at once and
the preemptors go to them in turn (A B B A ...), half an interval apart, so drift on a shared
machine (another job, a compaction, a GC) falls on both modes alike rather than on whichever ran
second.

Every node is filled with low-priority pods (by default 2 x 500m CPU, bound by spec.nodeName,
Running on kwok), so each high-priority pod (by default 500m; --victims N: N low pods' worth)
fits nowhere without preempting one (N) of them. The
preemptors are created one per --interval seconds in each cluster, so each measures one
preemption rather than a queue of them. Victims have terminationGracePeriodSeconds 0, and the
local kwok removes a deleted pod at once unless it asks for a graceful deletion
(localcluster/kwok-stages/pod-delete.yaml): the figure is the preemptor's and the scheduler's
work, not a kubelet's shutdown.

Latency: from the watch event that shows the pod created (ADDED) to the one that shows it bound
(spec.nodeName set; the Binding also sets PodScheduled=True), both read by one watch per cluster
in this process on one monotonic clock. Timestamps in the objects have whole-second resolution;
the watch has the client's. The first --warmup preemptors per cluster are not counted. Stages,
per preemptor, from its creation: the scheduler's first failed attempt (PodScheduled=False),
its nomination (status.nominatedNodeName), its node's first victim terminating and gone.

stderr: progress; stdout: the figures, the last line
    live preemption: priogate p50 X ms p99 Y ms, kube-scheduler p50 X ms p99 Y ms
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.interleaved import percentile
from localcluster import LocalCluster, Options
from localcluster.objects import NODE_PREFIX
from localcluster.procs import ComponentFailed, progress, wait_until
from priogate.kube.cache import Obj, WatchCache
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.logs import configure_logging

NAMESPACE = "bench-preemption-live"
LOW, HIGH = "bench-live-low", "bench-live-high"
MODES = ("priogate", "kube-scheduler")
STAGES = ("unschedulable", "nominated", "victim terminating", "victim gone", "bound")


def pod_body(name: str, role: str, cpu: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priorityClassName": HIGH if role == "high" else LOW,
        # Victims go at once (see the module's docstring); the preemptors never terminate here.
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench-role": role}},
        "spec": spec,
    }


def _unschedulable(pod: Obj) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


@dataclass
class Seen:
    """What one cluster's watch saw, as time.monotonic() at the event."""

    first: dict[str, dict[str, float]] = field(default_factory=dict)  # pod -> stage -> time
    node_of: dict[str, str] = field(default_factory=dict)  # preemptor -> nominated or bound node
    victims: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # node -> events
    running_low: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_event(self, event_type: str, pod: Obj) -> None:
        now = time.monotonic()
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        name, role = meta.get("name", ""), (meta.get("labels") or {}).get("bench-role")
        with self.lock:
            if role == "low":
                node = spec.get("nodeName", "")
                if event_type == "DELETED":
                    self.running_low.discard(name)
                    self.victims.setdefault(node, []).append(("victim gone", now))
                elif meta.get("deletionTimestamp"):
                    self.running_low.discard(name)
                    self.victims.setdefault(node, []).append(("victim terminating", now))
                elif (pod.get("status") or {}).get("phase") == "Running":
                    self.running_low.add(name)
                return
            if role != "high" or event_type == "DELETED":
                return
            stages = self.first.setdefault(name, {})
            stages.setdefault("created", now)
            nominated = (pod.get("status") or {}).get("nominatedNodeName")
            if _unschedulable(pod):
                stages.setdefault("unschedulable", now)
            if nominated:
                stages.setdefault("nominated", now)
                self.node_of.setdefault(name, nominated)
            if spec.get("nodeName"):
                stages.setdefault("bound", now)
                self.node_of[name] = spec["nodeName"]

    def stages(self, name: str) -> dict[str, float]:
        """Seconds from the pod's creation to each stage it reached."""
        with self.lock:
            got = dict(self.first.get(name, {}))
            node = self.node_of.get(name)
            created = got.get("created")
            for stage, at in self.victims.get(node or "", []):
                if created is not None and at >= created:
                    got.setdefault(stage, at)
        return {s: got[s] - created for s in STAGES if s in got and created is not None}


class Arm:
    """One cluster in one mode, filled and watched."""

    def __init__(self, mode: str, state_dir: Path, nodes: int, per_node: int, victims: int) -> None:
        self.mode = mode
        self.nodes = nodes
        self.per_node = per_node
        self.victims = victims
        self.cluster = LocalCluster(
            Options(
                state_dir=state_dir,
                nodes=nodes,
                node_cpu="1",
                node_memory="4Gi",
                preemptor="priogate" if mode == "priogate" else "kube-scheduler",
            )
        )
        self.client: ApiClient | None = None
        self.seen = Seen()
        self.watch: WatchCache | None = None
        self.pods_path = resource_path("v1", "pods", NAMESPACE)

    def start(self) -> None:
        self.cluster.start()
        assert self.cluster.kubeconfig
        self.client = load_client(str(self.cluster.kubeconfig), pool_size=16)
        c = self.client
        c.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        for name, value in ((LOW, 0), (HIGH, 1000)):
            c.create(
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        wait_until(
            lambda: bool(c.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")),
            timeout=60,
            what=f"serviceaccount {NAMESPACE}/default exists",
        )
        self.watch = WatchCache(c, self.pods_path, f"bench-{self.mode}", on_event=self.seen.on_event).start()
        if not self.watch.wait_synced(60):
            raise RuntimeError("the bench's pod watch did not sync in 60 s")

    def fill(self) -> None:
        """`per_node` low-priority pods on every node, bound by name (no scheduling), Running."""
        assert self.client
        client, cpu = self.client, f"{1000 // self.per_node}m"
        bodies = [
            pod_body(f"low-{n}-{k}", "low", cpu, f"{NODE_PREFIX}{n}")
            for n in range(self.nodes)
            for k in range(self.per_node)
        ]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda b: client.create(self.pods_path, b), bodies))
        wait_until(
            lambda: len(self.seen.running_low) >= len(bodies),
            timeout=300,
            what=f"{len(bodies)} low-priority pods Running ({self.mode})",
            interval=1.0,
        )

    def create_preemptor(self, name: str) -> None:
        assert self.client
        cpu = f"{self.victims * (1000 // self.per_node)}m"  # the room of `victims` low pods
        self.client.create(self.pods_path, pod_body(name, "high", cpu))

    def bound(self, names: list[str]) -> int:
        with self.seen.lock:
            return sum("bound" in self.seen.first.get(n, {}) for n in names)

    def stop(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        self.cluster.stop()


def report(mode: str, arm: Arm, names: list[str], dump: dict[str, Any]) -> tuple[float, float]:
    per_pod = [arm.seen.stages(n) for n in names]
    dump[mode] = {
        n: {k: round(v * 1e3, 1) for k, v in s.items()} for n, s in zip(names, per_pod, strict=True)
    }
    latencies = [s["bound"] * 1e3 for s in per_pod if "bound" in s]
    missing = len(names) - len(latencies)
    if not latencies:
        raise RuntimeError(f"{mode}: no preemptor was bound")
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(
        f"{mode}: creation to binding p50 {p50:.0f} ms p99 {p99:.0f} ms, min {min(latencies):.0f} ms, "
        f"max {max(latencies):.0f} ms (n={len(latencies)}, not bound: {missing})"
    )
    medians = []
    for stage in STAGES:
        values = [s[stage] * 1e3 for s in per_pod if stage in s]
        if values:
            medians.append(f"{stage} {statistics.median(values):.0f}")
    print(f"{mode}: median ms from creation to: " + ", ".join(medians))
    slowest = max((s for s in per_pod if "bound" in s), key=lambda s: s["bound"])
    print(
        f"{mode}: the slowest, ms from creation to: "
        + ", ".join(f"{k} {v * 1e3:.0f}" for k, v in slowest.items())
    )
    return p50, p99


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100, help="kwok nodes per cluster (1 CPU each)")
    p.add_argument("--per-node", type=int, default=2, help="low-priority pods filling each node")
    p.add_argument("--victims", type=int, default=1, help="low-priority pods each preemptor needs gone")
    p.add_argument("--dump", type=Path, default=None, help="write every preemptor's stages (ms) as JSON here")
    p.add_argument("--preemptions", type=int, default=60, help="measured preemptors per mode")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured preemptors per mode first")
    p.add_argument("--interval", type=float, default=4.0, help="seconds between preemptors in a cluster")
    p.add_argument("--modes", default=",".join(MODES), help="priogate, kube-scheduler or both")
    args = p.parse_args()
    configure_logging("WARNING")  # the bench's watches log to stderr, and only trouble
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - set(MODES):
        p.error(f"--modes takes {' or '.join(MODES)}, comma-separated")
    total = args.warmup + args.preemptions
    if not 0 < args.victims < args.per_node or total > args.nodes * (args.per_node // args.victims - 1):
        p.error("more preemptors (or victims each) than the nodes' low-priority pods can make room for")
    progress(f"load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="priogate-bench-preemption-live-") as tmp, ExitStack() as stack:
        arms: dict[str, Arm] = {}
        for mode in modes:
            arm = Arm(mode, Path(tmp) / mode, args.nodes, args.per_node, args.victims)
            stack.callback(arm.stop)
            t0 = time.monotonic()
            arm.start()
            arm.fill()
            arms[mode] = arm
            progress(
                f"[{mode}] {args.nodes} nodes full ({args.nodes * args.per_node} low-priority pods) "
                f"in {time.monotonic() - t0:.0f} s"
            )
        names = [f"high-{i}" for i in range(total)]
        progress(
            f"creating {total} preemptors per mode ({args.victims} victim(s) each), one per "
            f"{args.interval:g} s in each cluster, "
            f"interleaved; load average {os.getloadavg()[0]:.1f}"
        )
        t_run = time.monotonic()
        for i, name in enumerate(names):
            order = modes if i % 2 == 0 else modes[::-1]
            for mode in order:
                tick = time.monotonic()
                arms[mode].create_preemptor(name)
                time.sleep(max(0.0, args.interval / len(order) - (time.monotonic() - tick)))
            if (i + 1) % 10 == 0:
                bound = ", ".join(f"{m} {arms[m].bound(names[: i + 1])}" for m in modes)
                progress(f"{i + 1}/{total} preemptors created; bound: {bound}; load {os.getloadavg()[0]:.1f}")
        try:
            wait_until(
                lambda: all(a.bound(names) == total for a in arms.values()),
                timeout=120,
                what="every preemptor bound",
                interval=0.5,
            )
        except ComponentFailed as e:  # report what was bound; the figures say how many were not
            progress(f"not all preemptors were bound: {e}")
        progress(f"run took {time.monotonic() - t_run:.0f} s; load average {os.getloadavg()[0]:.1f}")
        measured = names[args.warmup :]
        dump: dict[str, Any] = {}
        figures = {m: report(m, arms[m], measured, dump) for m in modes}
    if args.dump is not None:
        args.dump.write_text(json.dumps(dump, indent=1))
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if set(figures) == set(MODES):
        (g50, g99), (k50, k99) = figures["priogate"], figures["kube-scheduler"]
        print(
            f"live preemption: priogate p50 {g50:.0f} ms p99 {g99:.0f} ms, "
            f"kube-scheduler p50 {k50:.0f} ms p99 {k99:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
