"""Builders for test objects and an in-process app whose caches are fed directly."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import Flask

from priogate.kube.cache import WatchCache
from webhook.app import create_app
from webhook.view import CacheReads, CacheView


def fed_cache(name: str, objects: Iterable[dict[str, Any]] = (), *, synced: bool = True) -> WatchCache:
    return WatchCache.static(name, list(objects) if synced else None)


def make_view(
    classes: Iterable[dict[str, Any]] = (),
    *,
    synced: bool = True,
    quotas: Iterable[dict[str, Any]] = (),
    podgroups: Iterable[dict[str, Any]] = (),
    pods: Iterable[dict[str, Any]] = (),
    ledgers: Iterable[dict[str, Any]] = (),
    namespaces: Iterable[dict[str, Any]] = (),
    ledger_store: Any = None,
) -> CacheView:
    caches = {
        "priorityclasses": fed_cache("priorityclasses", classes, synced=synced),
        "resourcequotas": fed_cache("resourcequotas", quotas, synced=synced),
        "podgroups": fed_cache("podgroups", podgroups, synced=synced),
        "pods": fed_cache("pods", pods, synced=synced),
        "ledgers": fed_cache("ledgers", ledgers, synced=synced),
        "namespaces": fed_cache("namespaces", namespaces, synced=synced),
    }
    from priogate.ledger.codec import covered_namespace, ledger_of
    from priogate.ledger.memory import MemoryLedgerStore

    view = CacheView(caches, ledger_store)
    if ledger_store is None:
        view.ledger_store = MemoryLedgerStore(lambda namespace: CacheReads(view, namespace))
    elif getattr(ledger_store, "reads", False) is None:
        ledger_store.reads = lambda namespace: CacheReads(view, namespace)
    if isinstance(view.ledger_store, MemoryLedgerStore):
        for obj in ledgers:  # the in-process record starts as the cached one
            view.ledger_store.ledgers.setdefault(covered_namespace(obj), ledger_of(obj))
    return view


def make_app(classes: Iterable[dict[str, Any]] = (), **kw: Any) -> Flask:
    return create_app(make_view(classes, **kw))


# ---- Kubernetes objects --------------------------------------------------------------------------
# One builder per kind, for every test (unit, integration, e2e): the name first, everything else
# by keyword. A field is written only when asked for, except apiVersion, kind, the name, the
# namespace ("default"; None leaves it out, as in a manifest whose namespace the request path
# gives) and, for Pods and PodGroups, creationTimestamp and a PodGroup's uid (which the API server
# replaces on create anyway). Times are seconds after EPOCH, the tests' clock: every object was
# created at EPOCH unless `created` says otherwise (None: no creationTimestamp).

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
IMAGE = "registry.k8s.io/pause:3.10"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


def ts(seconds: float) -> str:
    """RFC 3339 time `seconds` after EPOCH."""
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(
    name: str | None,
    namespace: str | None,
    created: float | None,
    *,
    generate_name: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if name is not None:
        meta["name"] = name
    if generate_name is not None:
        meta["generateName"] = generate_name
    if namespace is not None:
        meta["namespace"] = namespace
    if uid is not None:
        meta["uid"] = uid
    if created is not None:
        meta["creationTimestamp"] = ts(created)
    return meta


def pod(
    name: str | None = "p",
    *,
    namespace: str | None = "default",
    generate_name: str | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    preemption_policy: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    node: str | None = None,
    phase: str | None = None,
    nominated: str | None = None,
    group: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: str | None = None,
    created: float | None = 0,
    started: float | None = 0,
    deleting: bool = False,
    preempted: bool = False,
    node_selector: Mapping[str, str] | None = None,
    node_affinity: list[dict[str, Any]] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    gated: bool = False,
    image: str = IMAGE,
) -> dict[str, Any]:
    """A Pod with one container "c".

    Resources: `cpu` and `memory` are requests, `requests` adds others (extended resources,
    ephemeral-storage), `limits` are the container's limits; with none of them the container has
    no `resources`. `group` is the PodGroup annotation; `owner` a controller kind in
    ownerReferences (e.g. "DaemonSet"); `deleting` sets a deletionTimestamp; `node_affinity` is
    the list of required nodeSelectorTerms; `gated` adds a scheduling gate.

    Status: a pod on a `node`, or with a `phase`, a `nominated` node or `preempted` (the
    scheduler's DisruptionTarget condition) has one, its phase Running on a node and Pending
    otherwise unless `phase` says; a pod on a node started `started` seconds after EPOCH (None:
    not yet). Any other pod is a manifest without status.
    """
    meta = _meta(name, namespace, created, generate_name=generate_name)
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations or group:
        meta["annotations"] = dict(annotations or {})
        if group:
            meta["annotations"][GROUP_ANNOTATION] = group
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "owner", "apiVersion": "apps/v1", "uid": "u"}]
    if deleting:
        meta["deletionTimestamp"] = ts(10**6)

    container: dict[str, Any] = {"name": "c", "image": image}
    resources: dict[str, Any] = {}
    if cpu is not None or memory is not None or requests is not None:
        asked = {"cpu": cpu, "memory": memory, **(requests or {})}
        resources["requests"] = {k: v for k, v in asked.items() if v is not None}
    if limits is not None:
        resources["limits"] = dict(limits)
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container]}
    if priority is not None:
        spec["priority"] = priority
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if preemption_policy is not None:
        spec["preemptionPolicy"] = preemption_policy
    if node is not None:
        spec["nodeName"] = node
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if node_affinity is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_affinity}
            }
        }
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if gated:
        spec["schedulingGates"] = [{"name": "example.com/gate"}]

    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if node is not None or phase is not None or nominated is not None or preempted:
        status: dict[str, Any] = {"phase": phase or ("Running" if node else "Pending")}
        if node is not None and started is not None:
            status["startTime"] = ts(started)
        if nominated is not None:
            status["nominatedNodeName"] = nominated
        if preempted:
            status["conditions"] = [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
            ]
        obj["status"] = status
    return obj


def node(
    name: str,
    *,
    cpu: str | None = "4",
    memory: str | None = "8Gi",
    pods: int | None = 110,
    allocatable: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node with `cpu`, `memory` and `pods` allocatable (None leaves one out), plus
    `allocatable` (extended resources); capacity equals allocatable. Its labels always include
    kubernetes.io/hostname."""
    amounts = {
        "cpu": cpu,
        "memory": memory,
        "pods": None if pods is None else str(pods),
        **(allocatable or {}),
    }
    alloc = {k: v for k, v in amounts.items() if v is not None}
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def podgroup(
    name: str,
    *,
    namespace: str | None = "default",
    uid: str | None = None,
    created: float | None = 0,
    min_member: int | None = None,
    min_resources: Mapping[str, str] | None = None,
    priority_class: str | None = None,
    queue: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    """A Volcano PodGroup; its uid is "uid-<name>" unless given (ledger() uses the same). Only a
    group with a `phase` has a status."""
    spec: dict[str, Any] = {}
    if min_member is not None:
        spec["minMember"] = min_member
    if min_resources is not None:
        spec["minResources"] = dict(min_resources)
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if queue is not None:
        spec["queue"] = queue
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": _meta(name, namespace, created, uid=uid or f"uid-{name}"),
        "spec": spec,
    }
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def podgroup_body(
    name: str,
    min_resources: Mapping[str, Any] | None = None,
    *,
    min_member: int | None = 1,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Volcano PodGroup as a client sends it: no namespace, uid or timestamps. `spec` takes the
    API's own field names (priorityClassName=..., queue=...) and wins over the keywords; with
    min_member=None the spec has no minMember unless `spec` gives one."""
    full: dict[str, Any] = {}
    if min_member is not None:
        full["minMember"] = min_member
    if min_resources is not None:
        full["minResources"] = dict(min_resources)
    full.update(spec)
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": full}


def priority_class(
    name: str,
    *,
    value: int,
    default: bool = False,
    preemption_policy: str | None = "PreemptLowerPriority",
    description: str | None = None,
) -> dict[str, Any]:
    """A PriorityClass as stored: preemptionPolicy is set (None leaves it to the API server's
    defaulting, as a manifest does)."""
    pc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }
    if preemption_policy is not None:
        pc["preemptionPolicy"] = preemption_policy
    if description is not None:
        pc["description"] = description
    return pc


SYSTEM_CLASSES = [
    priority_class("system-node-critical", value=2000001000),
    priority_class("system-cluster-critical", value=2000000000),
]


def resource_quota(
    name: str,
    *,
    hard: Mapping[str, str],
    used: Mapping[str, str] | None = None,
    namespace: str | None = "default",
    scopes: list[str] | None = None,
    scope_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ResourceQuota with its status filled (hard, and `used`) as kube-controller-manager does."""
    spec: dict[str, Any] = {"hard": dict(hard)}
    if scopes is not None:
        spec["scopes"] = scopes
    if scope_selector is not None:
        spec["scopeSelector"] = dict(scope_selector)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _meta(name, namespace, None),
        "spec": spec,
        "status": {"hard": dict(hard), "used": dict(used or {})},
    }


def pdb(
    name: str,
    *,
    match_labels: Mapping[str, str],
    allowed: int = 0,
    namespace: str | None = "default",
    disrupted: Iterable[str] = (),
) -> dict[str, Any]:
    """A PodDisruptionBudget selecting `match_labels`, `allowed` disruptions left, `disrupted`
    the pods the API server already counts as disrupted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(name, namespace, None),
        "spec": {"selector": {"matchLabels": dict(match_labels)}},
        "status": {"disruptionsAllowed": allowed, "disruptedPods": {d: ts(0) for d in disrupted}},
    }


def review(
    obj: dict | None,
    *,
    operation: str = "CREATE",
    old: dict | None = None,
    resource: str = "pods",
    sub_resource: str = "",
    api_version: str = "admission.k8s.io/v1",
    dry_run: bool = False,
) -> dict:
    group, kind = ("", "Pod") if resource == "pods" else ("scheduling.k8s.io", "PriorityClass")
    target = obj or old or {}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "operation": operation,
        "name": target.get("metadata", {}).get("name", ""),
        "namespace": target.get("metadata", {}).get("namespace", ""),
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "userInfo": {"username": "admin"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def decode_patch(response: dict) -> list[dict]:
    patch = response.get("patch")
    return json.loads(base64.b64decode(patch)) if patch else []


def group_review(
    obj: dict | None, *, operation: str = "CREATE", old: dict | None = None, dry_run: bool = False
) -> dict:
    body = review(obj, operation=operation, old=old, resource="pods", dry_run=dry_run)
    gvk = {"group": "scheduling.volcano.sh", "version": "v1beta1"}
    body["request"]["kind"] = {**gvk, "kind": "PodGroup"}
    body["request"]["resource"] = {**gvk, "resource": "podgroups"}
    return body


def ledger(namespace: str = "default", **groups: dict) -> dict:
    """A namespace's ledger (a ConfigMap in priogate-system) holding one entry per
    keyword: group name -> minResources (the uid is "uid-<group>", minMember 1)."""
    from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, ledger_object
    from priogate.ledger.model import Entry, Ledger

    entries = {
        f"uid-{g}": Entry(g, f"uid-{g}", res, 1, "", "2026-11-22T00:00:00Z") for g, res in groups.items()
    }
    return ledger_object(DEFAULT_LEDGER_NAMESPACE, namespace, Ledger(entries), None)
