"""The controller's enqueue verdict at scale, in CPU time (the 2 cores are shared, so no wall
clock): a Reconciler over static caches of G PodGroups in N namespaces (half holding, half
waiting, each namespace under a cpu/pods ResourceQuota and a scoped one) and P bound pods, no
API server. Three figures, CPU ms per reconcile decision (desired_status) of a waiting group:
    unchanged view: the caches did not change since the last decision
    after a write:  another group of its namespace had its status changed just before (as after
                    every status write)
    after a pod's change: a pod (a member in one of four) changed just before

    .venv/bin/python -m bench.enqueue [--groups 2000] [--namespaces 10] [--pods 20000]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from controller.caches import Caches
from controller.reconcile import Reconciler
from priogate.kube.cache import WatchCache

CLASSES = (("low", 100), ("mid", 1000), ("high", 10000))
SEED = 20260101


def _stamp(i: int) -> str:
    day, rest = divmod(i, 86400)
    return f"2026-01-{1 + day:02d}T{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}Z"


def _meta(name: str, namespace: str | None, i: int, **extra: Any) -> dict[str, Any]:
    meta = {
        "name": name,
        "uid": f"uid-{namespace}-{name}",
        "resourceVersion": "1",
        "creationTimestamp": _stamp(i),
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return {**meta, **extra}


def build(groups: int, namespaces: int, pods: int) -> tuple[Reconciler, list[dict[str, Any]]]:
    rng = random.Random(SEED)
    names = [f"team-{i}" for i in range(namespaces)]
    group_objs, pod_objs, quotas = [], [], []
    for ns in names:
        quotas.append(
            {
                "metadata": _meta("compute", ns, 0),
                "spec": {"hard": {"cpu": str(groups // namespaces), "pods": "100000"}},
                "status": {"used": {"cpu": str(groups // namespaces // 3), "pods": "10"}},
            }
        )
        scoped = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}
        quotas.append(
            {
                "metadata": _meta("high", ns, 0),
                "spec": {"hard": {"requests.cpu": "40"}, "scopeSelector": scoped},
                "status": {"used": {"requests.cpu": "1"}},
            }
        )
    for i in range(groups):
        ns = names[i % namespaces]
        cls = rng.choice(CLASSES)[0]
        phase = "Inqueue" if i % 2 else "Pending"
        group_objs.append(
            {
                "metadata": _meta(f"g{i}", ns, i),
                "spec": {
                    "minMember": 2,
                    "minResources": {"cpu": "1", "memory": "1Gi"},
                    "priorityClassName": cls,
                },
                "status": {"phase": phase},
            }
        )
    for i in range(pods):
        ns = names[i % namespaces]
        spec: dict[str, Any] = {
            "priority": rng.choice(CLASSES)[1],
            "nodeName": f"n{i % 500}",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
        }
        meta = _meta(f"p{i}", ns, i)
        if i % 4 == 0:  # a member of a holding group
            meta["annotations"] = {"scheduling.k8s.io/group-name": f"g{(i // 4 * 2 + 1) % groups}"}
        pod_objs.append({"metadata": meta, "spec": spec, "status": {"phase": "Running"}})
    nodes = [
        {
            "metadata": {"name": f"n{i}"},
            "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}},
        }
        for i in range(500)
    ]
    classes = [
        {"metadata": {"name": n}, "value": v, "preemptionPolicy": "PreemptLowerPriority"} for n, v in CLASSES
    ]
    caches = Caches(
        podgroups=WatchCache.static("podgroups", group_objs),
        pods=WatchCache.static("pods", pod_objs),
        quotas=WatchCache.static("quotas", quotas),
        nodes=WatchCache.static("nodes", nodes),
        ledgers=WatchCache.static("ledgers", []),
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", classes),
    )
    return Reconciler(None, caches, None), group_objs  # type: ignore[arg-type]


def _decide(r: Reconciler, group: dict[str, Any]) -> dict[str, Any]:
    meta = group["metadata"]
    return r.desired_status(group, r.members(meta["namespace"], meta["name"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--decisions", type=int, default=40)
    args = parser.parse_args()
    r, groups = build(args.groups, args.namespaces, args.pods)
    pods = r.caches.pods.items()
    waiting = [g for g in groups if g["status"]["phase"] == "Pending"]
    sample = waiting[:: max(1, len(waiting) // args.decisions)][: args.decisions]
    _decide(r, sample[0])  # the first view: built once per process, not per decision
    start = time.process_time()
    for group in sample:
        _decide(r, group)
    steady = (time.process_time() - start) / len(sample)
    writes = 0.0
    for i, group in enumerate(sample):
        namespace = group["metadata"]["namespace"]
        neighbours = [g for g in groups if g["metadata"]["namespace"] == namespace and g is not group]
        other = neighbours[(i * 7 + 1) % len(neighbours)]
        changed = {**other, "metadata": {**other["metadata"], "resourceVersion": str(100 + i)}}
        changed["status"] = {**other["status"], "running": i}  # a status write's echo
        start = time.process_time()
        r.caches.podgroups.apply_event("MODIFIED", changed)
        _decide(r, group)
        writes += time.process_time() - start
    pod_writes = 0.0
    for i, group in enumerate(sample):
        pod = pods[(i * 7919) % len(pods)]
        changed = {**pod, "metadata": {**pod["metadata"], "resourceVersion": str(100 + i)}}
        start = time.process_time()
        r.caches.pods.apply_event("MODIFIED", changed)
        _decide(r, group)
        pod_writes += time.process_time() - start
    print(
        f"{args.groups} groups in {args.namespaces} namespaces, {args.pods} bound pods: CPU ms per "
        f"decision of a waiting group: unchanged view {steady * 1000:.2f}, "
        f"after a write {writes / len(sample) * 1000:.2f}, "
        f"after a pod's change {pod_writes / len(sample) * 1000:.2f}"
    )


if __name__ == "__main__":
    main()
