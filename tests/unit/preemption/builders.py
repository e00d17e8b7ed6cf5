"""Small builders for snapshot objects, and a runner returning the simulate JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from priogate.preemption.engine import simulate
from priogate.preemption.snapshot import build_snapshot

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def ts(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def pod(
    name: str,
    priority: int | None = 0,
    cpu: str | None = "1",
    memory: str | None = None,
    *,
    on: str | None = None,
    ns: str = "default",
    start: float | None = 0,
    created: float | None = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    owner: str | None = None,
    nominated: str | None = None,
    terminating: bool = False,
    preempted: bool = False,
    policy: str | None = None,
    klass: str | None = None,
    selector: dict[str, str] | None = None,
    affinity: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    group: str | None = None,
    gated: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = {k: v for k, v in {"cpu": cpu, "memory": memory, **(extra or {})}.items() if v is not None}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels or {})}
    if created is not None:
        meta["creationTimestamp"] = ts(created)
    if annotations or group:
        meta["annotations"] = dict(annotations or {})
        if group:
            meta["annotations"]["scheduling.k8s.io/group-name"] = group
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "owner", "apiVersion": "apps/v1", "uid": "u"}]
    if terminating:
        meta["deletionTimestamp"] = ts(10**6)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if priority is not None:
        spec["priority"] = priority
    if klass is not None:
        spec["priorityClassName"] = klass
    if policy is not None:
        spec["preemptionPolicy"] = policy
    if on is not None:
        spec["nodeName"] = on
    if selector:
        spec["nodeSelector"] = selector
    if affinity is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": affinity}
            }
        }
    if tolerations:
        spec["tolerations"] = tolerations
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/gate"}]
    status: dict[str, Any] = {"phase": phase or ("Running" if on else "Pending")}
    if on is not None and start is not None:
        status["startTime"] = ts(start)
    if nominated:
        status["nominatedNodeName"] = nominated
    if preempted:
        status["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def pdb(name: str, match: dict[str, str], allowed: int = 0, *, ns: str = "default", disrupted=()) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": match}},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": {d: ts(0) for d in disrupted}},
    }


def podgroup(
    name: str,
    min_member: int,
    *,
    klass: str | None = None,
    phase: str = "Inqueue",
    ns: str = "default",
    created=0,
) -> dict:
    spec: dict[str, Any] = {"minMember": min_member}
    if klass:
        spec["priorityClassName"] = klass
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": ts(created)},
        "spec": spec,
        "status": {"phase": phase},
    }


def pclass(name: str, value: int, *, default: bool = False, policy: str | None = None) -> dict:
    pc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }
    if policy:
        pc["preemptionPolicy"] = policy
    return pc


def run(objects: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    explain = options.get("explain", False)
    return simulate(build_snapshot(objects), **options).to_json(explain=explain)


def decided(result: dict[str, Any]) -> dict[str, tuple[str | None, list[str]]]:
    """preemptor -> (nominated node, victims)."""
    return {d["preemptor"]: (d["nominatedNode"], d["victims"]) for d in result["decisions"]}


def unresolved(result: dict[str, Any]) -> dict[str, str]:
    return {u["preemptor"]: u["reason"] for u in result["unresolved"]}
