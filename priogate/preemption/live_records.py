"""The records of the live state (live.py) kept from watch events: each event parses one
object (parse.py, as Snapshot.from_objects does), moves it between the per-node, per-group
and per-label indexes and marks what it changed, for LiveClusterState.current to refresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from priogate import priority as prio
from priogate.podgroup import TERMINAL_POD_PHASES
from priogate.preemption import parse
from priogate.preemption.fit import FIRST_DIMS, Vector, make_dims, to_vector
from priogate.preemption.labels import LabelIndex
from priogate.preemption.live_pdbs import ALLOWANCE, UNCHANGED, PDBSlots
from priogate.preemption.records import NodeInfo, PodGroupInfo, PodInfo
from priogate.preemption.state import is_pending

DELETED = "DELETED"


def object_key(obj: Mapping[str, Any]) -> str:
    """ "namespace/name" of a namespaced object as the snapshot keys it ("default" when the
    namespace is missing), leniently: deletions of malformed objects must still find it."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        return ""
    return f"{namespace if isinstance(namespace, str) and namespace else 'default'}/{name}"


def object_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _class_dependent(obj: Mapping[str, Any]) -> bool:
    """The pod's priority or preemption policy is resolved from a PriorityClass (not set by
    admission on the pod), so a class change can change it."""
    spec = obj.get("spec")
    return (
        not isinstance(spec, Mapping) or spec.get("priority") is None or spec.get("preemptionPolicy") is None
    )


class LiveRecords:
    """Records and indexes kept by `apply(kind, event type, object)`, with what changed since
    the last read marked; LiveClusterState derives the engine's state from them."""

    def __init__(
        self,
        *,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        podgroups: Iterable[Mapping[str, Any]] = (),
        pdbs: Iterable[Mapping[str, Any]] = (),
        priority_classes: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.skipped: dict[tuple[str, str], str] = {}  # (kind, key) -> why it is left out
        self.generation = 0  # bumps on every change the engine can see
        self._classes: dict[str, Mapping[str, Any]] = {}
        self._default_class: Mapping[str, Any] | None = None
        self._infos: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._class_pods: dict[str, Mapping[str, Any]] = {}  # raw pods _class_dependent
        self._vectors: dict[str, Vector] = {}
        self._on_node: dict[str, dict[str, PodInfo]] = {}  # node -> pods occupying it
        self._labels = LabelIndex()  # the occupying pods by namespace and label
        self._anti: dict[str, PodInfo] = {}  # pods with required anti-affinity (gang_fit.anti_pods)
        self._orphans: dict[str, set[str]] = {}  # unknown node -> pods bound there, not finished
        self._nominees: dict[str, set[str]] = {}  # node -> pending pods nominated to it
        self._members: dict[str, set[str]] = {}  # PodGroup key -> its pods
        self._owner_refs: dict[str, int] = {}  # pod key -> pods naming it as owner (ClusterState's)
        self._pdb_matches: dict[str, tuple[int, ...]] = {}  # occupying pod -> PDB slots
        self._raw_groups: dict[str, Mapping[str, Any]] = {}
        self._groups: dict[str, PodGroupInfo] = {}
        self._pdb_slots = PDBSlots()
        self._dirty_nodes: set[str] = set()
        self._dirty_nominated: set[str] = set()
        self._dirty_groups: set[str] = set()
        self._node_set_changed = True
        self._dims_changed = True
        # Placed pods and PodGroups whose victim units may have changed (units.patch_unit_index).
        self._unit_pods: set[str] = set()
        self._unit_groups: set[str] = set()

        for obj in priority_classes:
            self._set_class(obj)
        node_infos = [info for info in map(self._parse_node, nodes) if info is not None]
        pod_infos = []
        for obj in pods:
            pod = self._parse_pod(obj)
            if pod is not None:
                pod_infos.append(pod)
        self._dims = make_dims(node_infos, pod_infos)
        for info in node_infos:
            self._infos[info.name] = info
            self._on_node[info.name] = {}
        for obj in pdbs:  # before the pods, so each pod is matched once
            self.apply("pdbs", "ADDED", obj)
        for pod in pod_infos:
            self._link(pod)
        for obj in podgroups:
            self.apply("podgroups", "ADDED", obj)
        self._dirty_nodes = set(self._infos)
        self._dirty_nominated = set(self._nominees)
        self._dirty_groups = set(self._members)

    @property
    def dims(self) -> tuple[str, ...]:
        return self._dims

    # ---- writing ---------------------------------------------------------------------------

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
        """One watch event: kind is the controller's cache name ("pods", "nodes",
        "podgroups", "pdbs", "classes"); event type "ADDED", "MODIFIED", "DELETED" or "SYNC"
        (a relist). True when something the engine reads changed. Never raises on a
        malformed object: it is dropped and noted in `skipped`."""
        deleted = event_type == DELETED
        if kind == "pods":
            changed = self._apply_pod(obj, deleted)
        elif kind == "nodes":
            changed = self._apply_node(obj, deleted)
        elif kind == "podgroups":
            changed = self._apply_group(obj, deleted)
        elif kind == "pdbs":
            changed = self._apply_pdb(obj, deleted)
        elif kind == "classes":
            changed = self._apply_class(obj, deleted)
        else:
            return False  # quotas, ledgers: nothing preemption reads
        if changed:
            self.generation += 1
        return changed

    def _skip(self, kind: str, key: str, error: Exception | None) -> None:
        if error is None:
            self.skipped.pop((kind, key), None)
        else:
            self.skipped[(kind, key)] = str(error)

    # pods

    def _parse_pod(self, obj: Mapping[str, Any]) -> PodInfo | None:
        key = object_key(obj)
        try:
            pod = parse.parse_pod(obj, self._classes, self._default_class)
        except (ValueError, TypeError, AttributeError) as error:
            self._skip("Pod", key, error)
            return None
        self._skip("Pod", key, None)
        if _class_dependent(obj):
            self._class_pods[pod.key] = obj
        else:
            self._class_pods.pop(pod.key, None)
        return pod

    def _apply_pod(self, obj: Mapping[str, Any], deleted: bool) -> bool:
        key = object_key(obj)
        new = None
        if deleted:
            self._skip("Pod", key, None)
            self._class_pods.pop(key, None)
        else:
            new = self._parse_pod(obj)
            if new is None:
                self._class_pods.pop(key, None)
        return self._replace_pod(key, new)

    def _replace_pod(self, key: str, new: PodInfo | None) -> bool:
        old = self._pods.get(key)
        if old == new:
            return False
        if new is not None and any(name not in self._dims for name in new.requests):
            self._widen(new.requests)
        if old is not None:
            self._unlink(old)
        if new is not None:
            self._link(new)
        return True

    def _link(self, pod: PodInfo) -> None:
        key = pod.key
        self._pods[key] = pod
        if pod.pod_anti_affinity:
            self._anti[key] = pod
        self._vectors[key] = to_vector(pod.requests, self._dims, pod=True)
        for owner in pod.owner_pods:
            self._owner_refs[owner] = self._owner_refs.get(owner, 0) + 1
        if pod.group:
            self._members.setdefault(pod.group, set()).add(key)
            self._dirty_groups.add(pod.group)
        if pod.node_name and pod.phase not in TERMINAL_POD_PHASES:
            if pod.node_name in self._infos:
                self._occupy(pod)
            else:
                self._orphans.setdefault(pod.node_name, set()).add(key)
        if is_pending(pod) and pod.nominated_node:
            self._nominees.setdefault(pod.nominated_node, set()).add(key)
            self._dirty_nominated.add(pod.nominated_node)

    def _occupy(self, pod: PodInfo) -> None:
        self._on_node[pod.node_name][pod.key] = pod
        self._labels.add(pod)
        self._pdb_matches[pod.key] = self._pdb_slots.match(pod)
        self._dirty_nodes.add(pod.node_name)
        self._unit_change(pod)

    def _unit_change(self, pod: PodInfo) -> None:
        self._unit_pods.add(pod.key)
        if pod.group:
            self._unit_groups.add(pod.group)

    def _unlink(self, pod: PodInfo) -> None:
        key = pod.key
        del self._pods[key]
        self._anti.pop(key, None)
        self._vectors.pop(key, None)
        for owner in pod.owner_pods:
            left = self._owner_refs[owner] - 1
            if left:
                self._owner_refs[owner] = left
            else:
                del self._owner_refs[owner]
        if pod.group:
            _discard(self._members, pod.group, key)
            self._dirty_groups.add(pod.group)
        node = pod.node_name
        if node and key in self._on_node.get(node, {}):
            del self._on_node[node][key]
            self._labels.remove(pod)
            self._pdb_matches.pop(key, None)
            self._dirty_nodes.add(node)
            self._unit_change(pod)
        elif node:
            _discard(self._orphans, node, key)
        if pod.nominated_node and key in self._nominees.get(pod.nominated_node, ()):
            _discard(self._nominees, pod.nominated_node, key)
            self._dirty_nominated.add(pod.nominated_node)

    def _widen(self, resources: Iterable[str]) -> None:
        """New resource names: every vector is recomputed on the wider dimensions."""
        extra = (set(self._dims) | set(resources)) - set(FIRST_DIMS)
        self._dims = FIRST_DIMS + tuple(sorted(extra))
        self._vectors = {k: to_vector(p.requests, self._dims, pod=True) for k, p in self._pods.items()}
        self._dims_changed = True
        self._dirty_nodes |= set(self._infos)

    # nodes

    def _parse_node(self, obj: Mapping[str, Any]) -> NodeInfo | None:
        try:
            info = parse.parse_node(obj)
        except (ValueError, TypeError, AttributeError) as error:
            self._skip("Node", object_name(obj), error)
            return None
        self._skip("Node", info.name, None)
        return info

    def _apply_node(self, obj: Mapping[str, Any], deleted: bool) -> bool:
        name = object_name(obj)
        info = None
        if deleted:
            self._skip("Node", name, None)
        else:
            info = self._parse_node(obj)
        old = self._infos.get(name)
        if old == info:
            return False  # a heartbeat: nothing the engine reads
        if info is None:
            self._remove_node(name)
            return True
        if any(r not in self._dims for r in info.allocatable):
            self._widen(info.allocatable)
        self._infos[name] = info
        self._dirty_nodes.add(name)
        if old is None:
            self._on_node[name] = {}
            self._node_set_changed = True
            self._dirty_nominated.add(name)
            for key in sorted(self._orphans.pop(name, ())):
                self._occupy(self._pods[key])
        return True

    def _remove_node(self, name: str) -> None:
        del self._infos[name]
        for key, pod in self._on_node.pop(name, {}).items():
            self._labels.remove(pod)
            self._pdb_matches.pop(key, None)
            self._orphans.setdefault(name, set()).add(key)
            self._unit_change(pod)
        self._dirty_nodes.add(name)
        self._dirty_nominated.add(name)
        self._node_set_changed = True

    # PodGroups, PDBs, PriorityClasses

    def _apply_group(self, obj: Mapping[str, Any], deleted: bool) -> bool:
        key = object_key(obj)
        group = None
        self._raw_groups.pop(key, None)
        if not deleted:
            try:
                group = parse.parse_group(obj, self._classes)
                self._raw_groups[key] = obj
                self._skip("PodGroup", key, None)
            except (ValueError, TypeError, AttributeError) as error:
                self._skip("PodGroup", key, error)
        else:
            self._skip("PodGroup", key, None)
        return self._set_group(key, group)

    def _set_group(self, key: str, group: PodGroupInfo | None) -> bool:
        if self._groups.get(key) == group:
            return False
        if group is None:
            del self._groups[key]
        else:
            self._groups[key] = group
        self._unit_groups.add(key)  # whole-group units and their order
        return True

    def _apply_pdb(self, obj: Mapping[str, Any], deleted: bool) -> bool:
        key = object_key(obj)
        pdb = None
        if deleted:
            self._skip("PodDisruptionBudget", key, None)
        else:
            try:
                pdb = parse.parse_pdb(obj)
                self._skip("PodDisruptionBudget", key, None)
            except (ValueError, TypeError, AttributeError) as error:
                self._skip("PodDisruptionBudget", key, error)
        namespace = self._pdb_slots.put(key, pdb)
        if namespace is UNCHANGED:
            return False
        if namespace != ALLOWANCE:
            self._rematch(namespace)
        return True

    def _rematch(self, namespace: str) -> None:
        """PDB matches of the placed pods of `namespace`, after a PDB there changed."""
        placed = self._labels.namespaces.get(namespace)
        for key, pod in list(placed.pods.items()) if placed is not None else ():
            matches = self._pdb_matches[key]
            new = self._pdb_slots.match(pod)
            if new != matches:
                self._pdb_matches[key] = new
                self._dirty_nodes.add(pod.node_name)
                self._unit_change(pod)

    def _set_class(self, obj: Mapping[str, Any]) -> None:
        name = object_name(obj)
        try:
            self._classes[parse.parse_name(obj, "PriorityClass")] = parse.parse_priority_class(obj)
            self._skip("PriorityClass", name, None)
        except (ValueError, TypeError, AttributeError) as error:
            self._classes.pop(name, None)
            self._skip("PriorityClass", name, error)
        self._default_class = prio.current_default(self._classes.values())

    def _apply_class(self, obj: Mapping[str, Any], deleted: bool) -> bool:
        name = object_name(obj)
        before = (self._classes.get(name), self._default_class)
        if deleted:
            self._classes.pop(name, None)
            self._skip("PriorityClass", name, None)
            self._default_class = prio.current_default(self._classes.values())
        else:
            self._set_class(obj)
        if (self._classes.get(name), self._default_class) == before:
            return False
        # Re-resolve what was resolved against the classes (a bigger, but rare, update).
        changed = False
        for raw in list(self._class_pods.values()):
            changed |= self._apply_pod(raw, deleted=False)
        for key, raw in list(self._raw_groups.items()):
            try:
                changed |= self._set_group(key, parse.parse_group(raw, self._classes))
            except ValueError as error:  # cannot happen: classes only resolve, never fail
                self._skip("PodGroup", key, error)
                changed |= self._set_group(key, None)
        return changed


def _discard(index: dict[str, set[str]], name: str, key: str) -> None:
    keys = index.get(name)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[name]
