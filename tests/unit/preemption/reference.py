"""An independent, deliberately naive implementation of single-pod preemption, for property
tests: plain loops over plain dicts, no prefix sums, no bisect, no pruning, its own quantity
parsing (only the formats the generators produce). Same rules as the engine:

- pending pods in order of priority (desc), creation time, key; a pod that fits anywhere
  (resources after pods nominated with priority >= its own) gets nothing;
- preemptionPolicy Never, and a nominated node holding lower-priority pods the scheduler is
  terminating, make a pod ineligible;
- possible victims: lower priority, not terminating, not DaemonSet/mirror, not opted out
  (soft mode: opted-out ones allowed only when no node works otherwise);
- lower-priority terminating pods are leaving: their space counts as free for the preemptor;
- reprieve most important first (PDB-violating first), node order by kube-scheduler's keys;
- the decision is applied before the next pod.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

SHIFT = 2**31
DIMS = ("cpu", "memory", "pods")


def quantity(text: str | None, dim: str) -> int:
    if text in (None, "", "0"):
        return 0
    if dim == "cpu":
        return int(text[:-1]) if text.endswith("m") else int(text) * 1000
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def seconds(text: str | None) -> float:
    return datetime.fromisoformat(text).timestamp() if text else float("inf")


class Pod:
    def __init__(self, obj: dict[str, Any]) -> None:
        meta, spec, status = obj["metadata"], obj["spec"], obj.get("status", {})
        self.key = f"{meta.get('namespace', 'default')}/{meta['name']}"
        self.name = meta["name"]
        self.namespace = meta.get("namespace", "default")
        self.labels = meta.get("labels") or {}
        self.priority = spec.get("priority", 0)
        self.policy = spec.get("preemptionPolicy", "PreemptLowerPriority")
        requests = spec["containers"][0]["resources"].get("requests", {})
        self.req = {
            "cpu": quantity(requests.get("cpu"), "cpu"),
            "memory": quantity(requests.get("memory"), "memory"),
        }
        self.req["pods"] = 1
        self.node = spec.get("nodeName")
        self.nominated = status.get("nominatedNodeName")
        self.phase = status.get("phase", "Pending")
        self.terminating = "deletionTimestamp" in meta
        self.by_scheduler = any(
            c.get("reason") == "PreemptionByScheduler" for c in status.get("conditions", [])
        )
        self.start = seconds(status.get("startTime"))
        self.created = seconds(meta.get("creationTimestamp"))
        owners = meta.get("ownerReferences") or []
        annotations = meta.get("annotations") or {}
        self.protected = (
            any(o["kind"] == "DaemonSet" for o in owners) or "kubernetes.io/config.mirror" in annotations
        )
        self.opted_out = self.labels.get("priogate.io/allow-preemption") == "false"
        self.selector = spec.get("nodeSelector") or {}
        self.tolerations = spec.get("tolerations") or []

    @property
    def importance(self) -> tuple:
        return (-self.priority, self.start, self.key)


class Node:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.name = obj["metadata"]["name"]
        self.labels = obj["metadata"].get("labels") or {}
        alloc = obj["status"]["allocatable"]
        self.alloc = {d: quantity(alloc.get(d), d) for d in DIMS}
        self.taints = obj["spec"].get("taints") or []
        self.unschedulable = obj["spec"].get("unschedulable", False)


def tolerates(pod: Pod, key: str, value: str, effect: str) -> bool:
    for t in pod.tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        if t.get("key") and t["key"] != key:
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == value:
            return True
    return False


def static_ok(pod: Pod, node: Node) -> bool:
    if node.unschedulable and not tolerates(pod, "node.kubernetes.io/unschedulable", "", "NoSchedule"):
        return False
    if any(node.labels.get(k) != v for k, v in pod.selector.items()):
        return False
    return all(
        t["effect"] not in ("NoSchedule", "NoExecute")
        or tolerates(pod, t["key"], t.get("value", ""), t["effect"])
        for t in node.taints
    )


def matches(pdb: dict[str, Any], pod: Pod) -> bool:
    want = pdb["spec"]["selector"]["matchLabels"]
    return (
        bool(pod.labels)
        and pdb["metadata"].get("namespace", "default") == pod.namespace
        and bool(want)
        and all(pod.labels.get(k) == v for k, v in want.items())
        and pod.name not in (pdb["status"].get("disruptedPods") or {})
    )


def used(pods: dict[str, Pod], pod: Pod, node: str, without: set[str]) -> dict[str, int]:
    """What `node` holds for `pod`: its pods (minus `without`) and the pods nominated to it
    with priority >= pod's."""
    total = dict.fromkeys(DIMS, 0)
    for q in pods.values():
        if q.phase in ("Succeeded", "Failed"):
            continue
        bound_here = q.node == node and q.key not in without
        held_here = (
            not q.node
            and q.nominated == node
            and q.priority >= pod.priority
            and q.key != pod.key
            and not q.terminating
        )
        if bound_here or held_here:
            for d in DIMS:
                total[d] += q.req[d]
    return total


def fits(
    pods: dict[str, Pod], nodes: dict[str, Node], pod: Pod, node: str, without: set[str] = frozenset()
) -> bool:
    u = used(pods, pod, node, without)
    return all(pod.req[d] == 0 or pod.req[d] <= nodes[node].alloc[d] - u[d] for d in DIMS)


def waiting(pods: dict[str, Pod], nodes: dict[str, Node], pod: Pod) -> bool:
    nominated = nodes.get(pod.nominated) if pod.nominated else None
    return (
        nominated is not None
        and static_ok(pod, nominated)
        and any(
            q.node == nominated.name
            and q.terminating
            and q.by_scheduler
            and q.priority < pod.priority
            and not q.protected
            for q in pods.values()
        )
    )


def candidates(
    pods: dict[str, Pod], nodes: dict[str, Node], pdbs: list[dict], pod: Pod, allow_opted_out: bool
) -> list[tuple]:
    found = []
    for name in sorted(nodes):
        if not static_ok(pod, nodes[name]):
            continue
        on_node = [q for q in pods.values() if q.node == name and q.phase not in ("Succeeded", "Failed")]
        leaving = {q.key for q in on_node if q.terminating and q.priority < pod.priority}
        possible = sorted(
            (
                q
                for q in on_node
                if q.priority < pod.priority
                and not q.terminating
                and not q.protected
                and (allow_opted_out or not q.opted_out)
            ),
            key=lambda q: q.importance,
        )
        removed = leaving | {q.key for q in possible}
        if not fits(pods, nodes, pod, name, removed):
            continue
        allowed = {i: pdb["status"].get("disruptionsAllowed", 0) for i, pdb in enumerate(pdbs)}
        violating = set()
        for q in possible:
            for i, pdb in enumerate(pdbs):
                if matches(pdb, q):
                    allowed[i] -= 1
                    if allowed[i] < 0:
                        violating.add(q.key)

        def reprieve_order(q: Pod, violating: set[str] = violating) -> tuple:
            return (not (allow_opted_out and q.opted_out), q.key not in violating, q.importance)

        victims = []
        for q in sorted(possible, key=reprieve_order):
            removed.discard(q.key)
            if not fits(pods, nodes, pod, name, removed):
                removed.add(q.key)
                victims.append(q)
        victims.sort(key=lambda q: q.importance)
        if victims:
            top = victims[0].priority
            key = (
                sum(1 for q in victims if q.opted_out) if allow_opted_out else 0,
                sum(1 for q in victims if q.key in violating),
                top,
                sum(q.priority + SHIFT for q in victims),
                len(victims),
                -min(q.start for q in victims if q.priority == top),
                name,
            )
        else:
            key = (0, 0, -(2**31) - 1, 0, 0, float("-inf"), name)
        found.append((key, name, victims))
    return found


def simulate(objects: list[dict[str, Any]], opt_out_mode: str = "hard") -> list[tuple]:
    """[(preemptor, "preempt", node, [victims...]) or (preemptor, "unresolved")]."""
    nodes = {o["metadata"]["name"]: Node(o) for o in objects if o["kind"] == "Node"}
    pods = {p.key: p for p in (Pod(o) for o in objects if o["kind"] == "Pod")}
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    out: list[tuple] = []
    pending = [
        p
        for p in pods.values()
        if not p.node and p.phase not in ("Succeeded", "Failed") and not p.terminating
    ]
    for pod in sorted(pending, key=lambda p: (-p.priority, p.created, p.key)):
        if any(static_ok(pod, nodes[n]) and fits(pods, nodes, pod, n) for n in nodes):
            continue
        if pod.policy == "Never" or waiting(pods, nodes, pod):
            out.append((pod.key, "unresolved"))
            continue
        found = candidates(pods, nodes, pdbs, pod, False)
        if not found and opt_out_mode == "soft" and any(q.opted_out for q in pods.values()):
            found = candidates(pods, nodes, pdbs, pod, True)
        if not found:
            out.append((pod.key, "unresolved"))
            continue
        _, node, victims = min(found, key=lambda f: f[0])
        out.append((pod.key, "preempt", node, [q.key for q in victims]))
        for q in victims:
            del pods[q.key]
        for q in pods.values():
            if not q.node and q.nominated == node and q.priority < pod.priority:
                q.nominated = None
        pod.node, pod.nominated, pod.phase = node, None, "Running"
    return out
