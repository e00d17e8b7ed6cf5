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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from priogate import priority as prio
from priogate.preemption.parse import (
    parse_group,
    parse_name,
    parse_node,
    parse_pdb,
    parse_pod,
    parse_priority_class,
)
from priogate.preemption.records import NodeInfo, PDBInfo, PodGroupInfo, PodInfo

KINDS = ("Node", "Pod", "PodGroup", "PodDisruptionBudget", "PriorityClass")


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
        classes = {parse_name(pc, "PriorityClass"): parse_priority_class(pc) for pc in priority_classes}
        default_class = prio.current_default(classes.values())
        node_records = tuple(parse_node(obj) for obj in nodes)
        pod_records = tuple(parse_pod(obj, classes, default_class) for obj in pods)
        groups = tuple(parse_group(obj, classes) for obj in podgroups)
        pdb_records = tuple(parse_pdb(obj) for obj in pdbs)
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
