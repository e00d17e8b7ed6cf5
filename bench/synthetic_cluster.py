"""The synthetic clusters and watch-event streams of `bench.preemption`.

A cluster of N nodes with 30 pods each: a DaemonSet pod and 29 workload pods in four
priority classes, some in PodGroups (victim gangs of 8 members), some under PDBs, every 20th
node tainted, nearly full, so every decision needs victims. Its preemptors: one
high-priority pod ("prod/urgent"), one with hard topology spread constraints (zone and
hostname, "<namespace>/spread", among the pods of app-0) and a PodGroup needing 16 members
("prod/training"). Seeded: the same N gives the same cluster.
"""

from __future__ import annotations

import copy
import random
from typing import Any

PODS_PER_NODE = 30
SEED = 20260101
PRIORITIES = ((0, 0.4), (100, 0.3), (1000, 0.2), (10000, 0.1))
PREEMPTOR_PRIORITY = 100000


def iso(seconds: int) -> str:
    day, rest = divmod(seconds, 86400)
    return f"2026-01-{1 + day:02d}T{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}Z"


def pod(name: str, ns: str, priority: int, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": extra.pop("labels", {})}
    meta.update(extra.pop("meta", {}))
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if "spread" in extra:
        spec["topologySpreadConstraints"] = extra.pop("spread")
    status: dict[str, Any] = {"phase": "Pending"}
    if "node" in extra:
        spec["nodeName"] = extra.pop("node")
        status = {"phase": "Running", "startTime": extra.pop("start")}
    meta.setdefault("creationTimestamp", iso(0))
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
                "metadata": {"name": f"job-{g}", "namespace": ns, "creationTimestamp": iso(g)},
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
            pod(
                f"agent-{n}",
                "kube-system",
                2000001000,
                "100m",
                "128Mi",
                node=name,
                start=iso(0),
                meta=daemon,
            )
        )
        for slot in range(1, PODS_PER_NODE):
            start = iso(rng.randrange(30 * 86400))
            cpu = f"{millis[slot - 1]}m"
            memory = f"{rng.randrange(1, 5)}Gi"
            g = group_slots.get((n, slot))
            if g is not None:
                ns, job = groups[g]
                meta = {"annotations": {"scheduling.k8s.io/group-name": job}}
                objects.append(
                    pod(f"{job}-{n}-{slot}", ns, 100, cpu, memory, node=name, start=start, meta=meta)
                )
                continue
            ns, app = rng.choice(apps)
            priority = rng.choices(values, weights)[0]
            labels = {"app": app}
            objects.append(
                pod(f"{app}-{n}-{slot}", ns, priority, cpu, memory, node=name, start=start, labels=labels)
            )
    objects.append(pod("urgent", "prod", PREEMPTOR_PRIORITY, "4", "8Gi", meta={"creationTimestamp": iso(10)}))
    ns, app = apps[0]
    selector = {"matchLabels": {"app": app}}
    spread = [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}
        for key in ("zone", "kubernetes.io/hostname")
    ]
    objects.append(
        pod(
            "spread",
            ns,
            PREEMPTOR_PRIORITY,
            "4",
            "8Gi",
            labels={"app": app},
            meta={"creationTimestamp": iso(11)},
            spread=spread,
        )
    )
    objects.append(
        {
            "kind": "PodGroup",
            "metadata": {"name": "training", "namespace": "prod", "creationTimestamp": iso(5)},
            "spec": {"minMember": 16},
            "status": {"phase": "Inqueue"},
        }
    )
    for m in range(16):
        meta = {"annotations": {"scheduling.k8s.io/group-name": "training"}, "creationTimestamp": iso(5)}
        objects.append(pod(f"training-{m}", "prod", PREEMPTOR_PRIORITY, "4", "8Gi", meta=meta))
    return objects


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
        pending = pod(name, "churn", priority, "500m", "1Gi", labels={"app": "churn"})
        bound = pod(name, "churn", priority, "500m", "1Gi", node=node["metadata"]["name"], start=iso(9))
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
    status = {**node["status"], "conditions": [{"type": "Ready", "lastHeartbeatTime": iso(beat)}]}
    return {**node, "status": status}
