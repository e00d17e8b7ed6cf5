"""API objects to preemption records, one object at a time: what Snapshot.from_objects and
the live state (live.py) both parse with. Every malformed input raises ValueError naming the
object.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from priogate import priority as prio
from priogate.clock import epoch_seconds
from priogate.podgroup import GROUP_ANNOTATION, GROUP_LABEL, PodPhase
from priogate.preemption.pod_affinity import parse_host_ports, parse_pod_affinity
from priogate.preemption.qos import pod_qos
from priogate.preemption.records import DAEMONSET_POD, NodeInfo, PDBInfo, PodGroupInfo, PodInfo
from priogate.preemption.selectors import (
    parse_label_selector,
    parse_node_selector_terms,
    parse_taints,
    parse_tolerations,
)
from priogate.preemption.spread import parse_spread
from priogate.preemption_record import (
    CONDITION_REASON,
    DISRUPTION_TARGET,
    MIRROR_ANNOTATION,
    SCHEDULER_REASON,
    opt_out_label,
)
from priogate.resources import parse_resource_list, pod_requests


def _meta(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError(f"{kind} without metadata")
    return meta


def parse_name(obj: Mapping[str, Any], kind: str) -> str:
    name = _meta(obj, kind).get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} without metadata.name")
    return name


def _namespaced(
    obj: Mapping[str, Any], kind: str
) -> tuple[Mapping[str, Any], str, str, str, str, Mapping[str, Any], Mapping[str, Any]]:
    """metadata, namespace, name, "namespace/name", the prefix of error messages, spec, status."""
    meta = _meta(obj, kind)
    name = parse_name(obj, kind)
    namespace = _text(meta.get("namespace"), f"{kind} {name} metadata.namespace") or "default"
    key = f"{namespace}/{name}"
    where = f"{kind} {key}"
    return meta, namespace, name, key, where, _section(obj, "spec", where), _section(obj, "status", where)


def _section(obj: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = obj.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: {name} must be an object")
    return value


def _text(value: Any, where: str) -> str:
    """A string field; absent means ""."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {type(value).__name__}")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a map of strings")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def parse_time(value: Any, where: str) -> float:
    """RFC 3339 to epoch seconds; absent means +inf ("now": later than anything recorded)."""
    if value in (None, ""):
        return math.inf
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected an RFC 3339 time, got {value!r}")
    try:
        return epoch_seconds(value)
    except ValueError:
        raise ValueError(f"{where}: invalid RFC 3339 time {value!r}") from None


def parse_priority_class(pc: Mapping[str, Any]) -> Mapping[str, Any]:
    where = f"PriorityClass {parse_name(pc, 'PriorityClass')}"
    value = pc.get("value", 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: value must be an integer")
    if pc.get("globalDefault") not in (None, True, False):
        raise ValueError(f"{where}: globalDefault must be a boolean")
    if pc.get("preemptionPolicy") not in (None, prio.PREEMPT_LOWER_PRIORITY, prio.PREEMPT_NEVER):
        raise ValueError(f"{where}: unsupported preemptionPolicy {pc.get('preemptionPolicy')!r}")
    return pc


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    name = parse_name(obj, "Node")
    where = f"Node {name}"
    spec = _section(obj, "spec", where)
    status = _section(obj, "status", where)
    raw_alloc = status.get("allocatable")
    if raw_alloc is None:  # kubelets always report it; fall back for hand-written snapshots
        raw_alloc = status.get("capacity")
    allocatable = parse_resource_list(raw_alloc, context=f"{where} allocatable")
    return NodeInfo(
        name=name,
        labels=_string_map(_meta(obj, "Node").get("labels"), f"{where} labels"),
        taints=parse_taints(spec.get("taints"), where),
        unschedulable=spec.get("unschedulable") is True,
        allocatable=allocatable,
    )


def parse_pod(obj: Mapping[str, Any], classes: Mapping[str, Any], default_class: Mapping | None) -> PodInfo:
    meta, namespace, name, key, where, spec, status = _namespaced(obj, "Pod")
    labels = _string_map(meta.get("labels"), f"{where} labels")
    annotations = _string_map(meta.get("annotations"), f"{where} annotations")
    priority, policy, note = _pod_priority(spec, classes, default_class, where)
    try:
        requests = pod_requests(obj)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    negative = sorted(r for r, q in requests.items() if q < 0)
    if negative:
        raise ValueError(f"{where}: negative request for {', '.join(negative)}")
    owners = meta.get("ownerReferences") or []
    if not isinstance(owners, list):
        raise ValueError(f"{where}: ownerReferences must be a list")
    protected = ""
    owner_pods: tuple[str, ...] = ()
    if owners:
        named = {
            f"{namespace}/{o['name']}"
            for o in owners
            if isinstance(o, Mapping) and o.get("kind") == "Pod" and isinstance(o.get("name"), str)
        }
        owner_pods = tuple(sorted(named))
    if any(isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in owners):
        protected = DAEMONSET_POD
    elif MIRROR_ANNOTATION in annotations:
        protected = "mirror pod"
    group_name = annotations.get(GROUP_ANNOTATION) or labels.get(GROUP_LABEL) or ""
    affinity = _section(_section(spec, "affinity", where), "nodeAffinity", where)
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    pod_affinity, pod_anti_affinity = parse_pod_affinity(spec, namespace, where)
    return PodInfo(
        key=key,
        namespace=namespace,
        name=name,
        labels=labels,
        priority=priority,
        preemption_policy=policy,
        priority_note=note,
        requests=requests,
        node_name=_text(spec.get("nodeName"), f"{where} spec.nodeName"),
        nominated_node=_text(status.get("nominatedNodeName"), f"{where} status.nominatedNodeName"),
        phase=_text(status.get("phase"), f"{where} status.phase") or PodPhase.PENDING,
        terminating=bool(meta.get("deletionTimestamp")),
        preempted_by_scheduler=_preempted_by_scheduler(status.get("conditions")),
        start_time=parse_time(status.get("startTime"), f"{where} status.startTime"),
        created=parse_time(meta.get("creationTimestamp"), f"{where} creationTimestamp"),
        protected=protected,
        opted_out=bool(opt_out_label(labels)),
        group=f"{namespace}/{group_name}" if group_name else "",
        node_selector=_string_map(spec.get("nodeSelector"), f"{where} nodeSelector"),
        affinity=None if required is None else parse_node_selector_terms(required, where),
        tolerations=parse_tolerations(spec.get("tolerations"), where),
        gated=bool(spec.get("schedulingGates")),
        qos=pod_qos(obj, where),
        owner_pods=owner_pods,
        unschedulable_since=_unschedulable_since(status.get("conditions"), where),
        spread=parse_spread(spec.get("topologySpreadConstraints"), labels, where),
        pod_affinity=pod_affinity,
        pod_anti_affinity=pod_anti_affinity,
        host_ports=parse_host_ports(spec, where),
    )


def _unschedulable_since(conditions: Any, where: str) -> float:
    """When the pod's PodScheduled condition turned False (the scheduler could not place it),
    +inf when it is not False; a False condition without a time counts as just now (+inf
    too: no delay has elapsed)."""
    if not isinstance(conditions, list):
        return math.inf
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled" and c.get("status") == "False":
            return parse_time(c.get("lastTransitionTime"), f"{where} PodScheduled lastTransitionTime")
    return math.inf


def _pod_priority(
    spec: Mapping[str, Any], classes: Mapping[str, Any], default_class: Mapping | None, where: str
) -> tuple[int, str, str]:
    """spec.priority when admission already set it, else the class (the webhook's rules)."""
    given = spec.get("priority")
    class_name = _text(spec.get("priorityClassName"), f"{where} spec.priorityClassName")
    policy = spec.get("preemptionPolicy")
    if given is not None and (not isinstance(given, int) or isinstance(given, bool)):
        raise ValueError(f"{where}: spec.priority must be an integer")
    if policy not in (None, prio.PREEMPT_LOWER_PRIORITY, prio.PREEMPT_NEVER):
        raise ValueError(f"{where}: unsupported preemptionPolicy {policy!r}")
    note = ""
    try:
        resolution = prio.resolve(class_name, classes, default_class)
    except prio.ClassNotFound:
        resolution = prio.Resolution(0, prio.PREEMPT_LOWER_PRIORITY, "", defaulted=False)
        if given is None:
            note = f'PriorityClass "{class_name}" not found, priority 0 assumed'
    priority = given if given is not None else resolution.priority
    return priority, policy or resolution.preemption_policy, note


def _preempted_by_scheduler(conditions: Any) -> bool:
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping)
        and c.get("type") == DISRUPTION_TARGET
        and c.get("status") == "True"
        and c.get("reason") in (SCHEDULER_REASON, CONDITION_REASON)
        for c in conditions
    )


def parse_group(obj: Mapping[str, Any], classes: Mapping[str, Any]) -> PodGroupInfo:
    meta, namespace, name, key, where, spec, status = _namespaced(obj, "PodGroup")
    min_member = spec.get("minMember", 1)
    if not isinstance(min_member, int) or isinstance(min_member, bool) or min_member < 0:
        raise ValueError(f"{where}: spec.minMember must be a non-negative integer")
    class_name = _text(spec.get("priorityClassName"), f"{where} spec.priorityClassName")
    priority: int | None = None
    policy = prio.PREEMPT_LOWER_PRIORITY
    note = ""
    if class_name:
        try:
            resolution = prio.resolve(class_name, classes, None)
            priority, policy = resolution.priority, resolution.preemption_policy
        except prio.ClassNotFound:
            priority, note = 0, f'PriorityClass "{class_name}" not found, priority 0 assumed'
    return PodGroupInfo(
        key=key,
        namespace=namespace,
        name=name,
        min_member=min_member,
        priority=priority,
        preemption_policy=policy,
        priority_note=note,
        phase=_text(status.get("phase"), f"{where} status.phase"),
        created=parse_time(meta.get("creationTimestamp"), f"{where} creationTimestamp"),
    )


def parse_pdb(obj: Mapping[str, Any]) -> PDBInfo:
    meta = _meta(obj, "PodDisruptionBudget")
    name = parse_name(obj, "PodDisruptionBudget")
    namespace = _text(meta.get("namespace"), f"PodDisruptionBudget {name} metadata.namespace") or "default"
    where = f"PodDisruptionBudget {namespace}/{name}"
    spec = _section(obj, "spec", where)
    status = _section(obj, "status", where)
    allowed = status.get("disruptionsAllowed", 0)
    if not isinstance(allowed, int) or isinstance(allowed, bool):
        raise ValueError(f"{where}: status.disruptionsAllowed must be an integer")
    disrupted = status.get("disruptedPods") or {}
    if not isinstance(disrupted, Mapping):
        raise ValueError(f"{where}: status.disruptedPods must be a map")
    selector = spec.get("selector")
    return PDBInfo(
        key=f"{namespace}/{name}",
        namespace=namespace,
        selector=None if selector is None else parse_label_selector(selector, where),
        disruptions_allowed=allowed,
        disrupted_pods=frozenset(str(k) for k in disrupted),
    )
