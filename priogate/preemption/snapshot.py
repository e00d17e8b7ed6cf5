"""A cluster snapshot: Nodes, Pods, PodGroups, PodDisruptionBudgets and PriorityClasses.

`Snapshot.from_objects` turns API objects, given per kind, into immutable, validated records
holding exactly what preemption needs; the controller calls it with its watch caches' contents.
`load_objects` turns YAML or JSON text into API objects and `build_snapshot` sorts a mixed list
of them by `kind` for `from_objects` (how `python -m controller simulate` reads a List file).
Every malformed input raises ValueError naming the object, so the CLI can print one line and
never a traceback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from priogate import priority as prio
from priogate.clock import epoch_seconds
from priogate.podgroup import GROUP_ANNOTATION, GROUP_LABEL, PodPhase
from priogate.preemption.qos import BURSTABLE, pod_qos
from priogate.preemption.selectors import (
    LabelSelector,
    NodeSelectorTerm,
    Taint,
    Toleration,
    parse_label_selector,
    parse_node_selector_terms,
    parse_taints,
    parse_tolerations,
)
from priogate.preemption.spread import SpreadConstraint, parse_spread
from priogate.preemption_record import (
    CONDITION_REASON,
    DISRUPTION_TARGET,
    MIRROR_ANNOTATION,
    OPT_OUT_LABEL,
    SCHEDULER_REASON,
)
from priogate.resources import ResourceList, parse_resource_list, pod_requests

NEVER = prio.PREEMPT_NEVER
DAEMONSET_POD = "DaemonSet pod"
KINDS = ("Node", "Pod", "PodGroup", "PodDisruptionBudget", "PriorityClass")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool
    allocatable: ResourceList


@dataclass(frozen=True, slots=True)
class PodInfo:
    key: str  # "namespace/name"
    namespace: str
    name: str
    labels: Mapping[str, str]
    priority: int
    preemption_policy: str
    priority_note: str  # why the priority is a guess (unknown class), else ""
    requests: ResourceList
    node_name: str  # "" while pending
    nominated_node: str
    phase: str
    terminating: bool
    preempted_by_scheduler: bool  # DisruptionTarget=True: preempted by the scheduler or priogate
    start_time: float  # epoch seconds; +inf when unknown ("now", the least important)
    created: float
    protected: str  # why it can never be a victim ("DaemonSet pod", "mirror pod"), else ""
    opted_out: bool
    group: str  # "namespace/name" of the PodGroup it names, else ""
    node_selector: Mapping[str, str]
    affinity: tuple[NodeSelectorTerm, ...] | None  # required node affinity terms, if any
    tolerations: tuple[Toleration, ...]
    gated: bool  # has scheduling gates: the scheduler does not consider it yet
    # Facts only the optional policies read (priogate.preemption.policy):
    qos: str = BURSTABLE  # QoS class, as the kubelet computes it (qos.pod_qos)
    owner_pods: tuple[str, ...] = ()  # "namespace/name" of the Pods its ownerReferences name
    # PodScheduled=False since (lastTransitionTime, epoch seconds); +inf when not unschedulable
    unschedulable_since: float = math.inf
    spread: tuple[SpreadConstraint, ...] = ()  # hard topology spread constraints (spread.py)

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def daemonset(self) -> bool:
        """Owned by a DaemonSet (its controller pins it to one node by node affinity)."""
        return self.protected == DAEMONSET_POD


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    key: str
    namespace: str
    name: str
    min_member: int
    priority: int | None  # None: no class named; the members' priority is used
    preemption_policy: str
    priority_note: str
    phase: str
    created: float


@dataclass(frozen=True, slots=True)
class PDBInfo:
    key: str
    namespace: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str]


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeInfo, ...]
    pods: tuple[PodInfo, ...]
    groups: tuple[PodGroupInfo, ...]
    pdbs: tuple[PDBInfo, ...]
    ignored_kinds: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_objects(
        cls,
        *,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        podgroups: Iterable[Mapping[str, Any]] = (),
        pdbs: Iterable[Mapping[str, Any]] = (),
        priority_classes: Iterable[Mapping[str, Any]] = (),
    ) -> Snapshot:
        """The snapshot of these API objects, one iterable per kind. The objects need no `kind`
        field (LIST and watch items carry none); each iterable is read once."""
        # PriorityClasses first: a pod's or group's priority is resolved against them.
        classes = {_name(pc, "PriorityClass"): _priority_class(pc) for pc in priority_classes}
        default_class = prio.current_default(classes.values())
        node_records = tuple(_node(obj) for obj in nodes)
        pod_records = tuple(_pod(obj, classes, default_class) for obj in pods)
        groups = tuple(_group(obj, classes) for obj in podgroups)
        pdb_records = tuple(_pdb(obj) for obj in pdbs)
        for kind, records in (("Node", node_records), ("Pod", pod_records), ("PodGroup", groups)):
            seen: set[str] = set()
            for record in records:
                key = record.name if isinstance(record, NodeInfo) else record.key
                if key in seen:
                    raise ValueError(f"{kind} {key} appears twice in the snapshot")
                seen.add(key)
        return cls(node_records, pod_records, groups, pdb_records)


# ---- text -> objects --------------------------------------------------------------------------


def load_objects(text: str) -> list[dict[str, Any]]:
    """API objects from YAML or JSON: a `List` (any `*List` kind), single objects, or several
    YAML documents of either."""
    stripped = text.lstrip()
    try:
        if stripped.startswith(("{", "[")):
            documents: list[Any] = [json.loads(text)]
        else:
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            documents = list(yaml.load_all(text, Loader=loader))
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"cannot parse snapshot: {_one_line(str(err))}") from None
    objects: list[dict[str, Any]] = []
    for document in documents:
        if document is None:
            continue
        if isinstance(document, list):
            candidates = document
        elif isinstance(document, dict) and isinstance(document.get("items"), list):
            candidates = document["items"]
        elif isinstance(document, dict) and "kind" in document:
            candidates = [document]
        else:
            raise ValueError("snapshot must be a Kubernetes List (kind: List, items: [...]) or API objects")
        for index, item in enumerate(candidates):
            if not isinstance(item, dict):
                raise ValueError(f"item {index}: expected an object, got {type(item).__name__}")
            objects.append(item)
    return objects


def _one_line(message: str) -> str:
    return " ".join(message.split())


# ---- objects -> snapshot ----------------------------------------------------------------------


def build_snapshot(objects: Iterable[Mapping[str, Any]]) -> Snapshot:
    """The snapshot of a mixed list of API objects (a List file's items), sorted by `kind`;
    kinds preemption does not read are counted in `ignored_kinds`."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {kind: [] for kind in KINDS}
    ignored: dict[str, int] = {}
    for index, obj in enumerate(objects):
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"item {index}: missing kind")
        if kind in by_kind:
            by_kind[kind].append(obj)
        else:
            ignored[kind] = ignored.get(kind, 0) + 1
    snapshot = Snapshot.from_objects(
        nodes=by_kind["Node"],
        pods=by_kind["Pod"],
        podgroups=by_kind["PodGroup"],
        pdbs=by_kind["PodDisruptionBudget"],
        priority_classes=by_kind["PriorityClass"],
    )
    return replace(snapshot, ignored_kinds=ignored)


def _meta(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError(f"{kind} without metadata")
    return meta


def _name(obj: Mapping[str, Any], kind: str) -> str:
    name = _meta(obj, kind).get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{kind} without metadata.name")
    return name


def _namespaced(
    obj: Mapping[str, Any], kind: str
) -> tuple[Mapping[str, Any], str, str, str, str, Mapping[str, Any], Mapping[str, Any]]:
    """metadata, namespace, name, "namespace/name", the prefix of error messages, spec, status."""
    meta = _meta(obj, kind)
    name = _name(obj, kind)
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


def _priority_class(pc: Mapping[str, Any]) -> Mapping[str, Any]:
    where = f"PriorityClass {_name(pc, 'PriorityClass')}"
    value = pc.get("value", 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}: value must be an integer")
    if pc.get("globalDefault") not in (None, True, False):
        raise ValueError(f"{where}: globalDefault must be a boolean")
    if pc.get("preemptionPolicy") not in (None, prio.PREEMPT_LOWER_PRIORITY, prio.PREEMPT_NEVER):
        raise ValueError(f"{where}: unsupported preemptionPolicy {pc.get('preemptionPolicy')!r}")
    return pc


def _node(obj: Mapping[str, Any]) -> NodeInfo:
    name = _name(obj, "Node")
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


def _pod(obj: Mapping[str, Any], classes: Mapping[str, Any], default_class: Mapping | None) -> PodInfo:
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
        opted_out=labels.get(OPT_OUT_LABEL, "").lower() == "false",
        group=f"{namespace}/{group_name}" if group_name else "",
        node_selector=_string_map(spec.get("nodeSelector"), f"{where} nodeSelector"),
        affinity=None if required is None else parse_node_selector_terms(required, where),
        tolerations=parse_tolerations(spec.get("tolerations"), where),
        gated=bool(spec.get("schedulingGates")),
        qos=pod_qos(obj, where),
        owner_pods=owner_pods,
        unschedulable_since=_unschedulable_since(status.get("conditions"), where),
        spread=parse_spread(spec.get("topologySpreadConstraints"), labels, where),
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


def _group(obj: Mapping[str, Any], classes: Mapping[str, Any]) -> PodGroupInfo:
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


def _pdb(obj: Mapping[str, Any]) -> PDBInfo:
    meta = _meta(obj, "PodDisruptionBudget")
    name = _name(obj, "PodDisruptionBudget")
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
