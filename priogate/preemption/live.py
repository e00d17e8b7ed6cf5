"""The engine's cluster state kept current from watch events, instead of rebuilt per decision.

The model is kube-scheduler's scheduler cache (pkg/scheduler/backend/cache): an event
updates the record of the one node it concerns and bumps that node's generation, and
UpdateSnapshot refreshes only the nodes whose generation moved since the last snapshot.
Here `apply` parses one object (the same parsers as Snapshot.from_objects), moves the pod
between the per-node indexes and marks the nodes it touched; `current` recomputes those
nodes' aggregates (state.node_state, as apply_decision does for a decision), patches their
rows of the screening tables (ScreenTable.patched) and the victim-unit index, and returns a
ClusterState for engine.decide_group, single.preempt_pod or engine.run.

The invariant (tests/unit/preemption/test_live.py): after any sequence of events, decisions
on `current()` equal those on prepare(Snapshot.from_objects(...)) of the objects the events
leave. A malformed object counts as absent: it is skipped, with the reason in `skipped`, and
the stream goes on (from_objects would refuse the whole snapshot).

What each kind of event costs:
- a pod or node event that changes nothing the engine reads (a status heartbeat, a pod's
  container statuses) is one parse and one comparison;
- a pod event that does changes one or two nodes (a bind moves the pod; a pending pod only
  its nominated node), recomputed at the next `current`;
- a node added or deleted re-sorts the node list and rebuilds the screening table;
- a resource name never seen before widens every vector (all of them are recomputed);
  dimensions never shrink: a dimension nobody asks for holds zeros and decides nothing;
- a PDB whose allowance alone changed (its usual update) is swapped in place; a new selector
  re-matches the bound pods of its namespace;
- a PriorityClass re-resolves the pods whose priority or preemption policy came from a class
  (admission sets both on every pod, so in a real cluster few or none) and every PodGroup.
The gang path's victim-unit index (units.unit_index), once a decision has built it, is
patched too: the units of the placed pods and PodGroups that changed are taken out and put
back in rank order (units.patch_unit_index), and only their nodes' rows are recomputed.

A ClusterState from `current` shares its mappings with this object (as kube-scheduler's
snapshot is updated in place at the start of each cycle): it is valid until the next
`apply`. Callers serialize the two (the controller holds one lock for both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from priogate import priority as prio
from priogate.podgroup import TERMINAL_POD_PHASES
from priogate.preemption import parse
from priogate.preemption.fit import FIRST_DIMS, Vector, make_dims, to_vector
from priogate.preemption.labels import LabelIndex
from priogate.preemption.records import NodeInfo, PDBInfo, PodGroupInfo, PodInfo
from priogate.preemption.state import (
    ClusterState,
    NodeState,
    ScreenRow,
    importance_key,
    is_pending,
    node_state,
    pdb_indices,
    screen_row,
)
from priogate.preemption.table import ScreenTable
from priogate.preemption.units import UnitIndex, patch_unit_index

DELETED = "DELETED"
# A free PDB slot: PDBs are referred to by their index in ClusterState.pdbs, so a deleted one
# leaves this behind (it matches no pod) rather than shifting every other's index.
_NO_PDB = PDBInfo(key="", namespace="", selector=None, disruptions_allowed=0, disrupted_pods=frozenset())
KIND_NAMES = {
    "pods": "Pod",
    "nodes": "Node",
    "podgroups": "PodGroup",
    "pdbs": "PodDisruptionBudget",
    "classes": "PriorityClass",
}


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


class LiveClusterState:
    """ClusterState kept current by `apply(kind, event type, object)`; see the module doc."""

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
        self._orphans: dict[str, set[str]] = {}  # unknown node -> pods bound there, not finished
        self._nominees: dict[str, set[str]] = {}  # node -> pending pods nominated to it
        self._members: dict[str, set[str]] = {}  # PodGroup key -> its pods
        self._owner_refs: dict[str, int] = {}  # pod key -> pods naming it as owner (ClusterState's)
        self._pdb_matches: dict[str, tuple[int, ...]] = {}  # occupying pod -> PDB slots
        self._raw_groups: dict[str, Mapping[str, Any]] = {}
        self._groups: dict[str, PodGroupInfo] = {}
        self._pdb_slots: list[PDBInfo] = []
        self._pdb_slot: dict[str, int] = {}
        self._pdbs: tuple[PDBInfo, ...] = ()  # the slots, as ClusterState.pdbs
        self._pdbs_by_namespace: dict[str, list[int]] = {}  # ascending slots
        # Derived, refreshed by `current` for what changed since the last call.
        self._nodes: dict[str, NodeState] = {}
        self._nominated: dict[str, tuple[PodInfo, ...]] = {}
        self._group_members: dict[str, frozenset[str]] = {}
        self._names: tuple[str, ...] = ()
        self._rows: list[ScreenRow] = []
        self._row_at: dict[str, int] = {}
        self._state: ClusterState | None = None
        self._state_generation = -1
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

    # ---- reading ---------------------------------------------------------------------------

    @property
    def dims(self) -> tuple[str, ...]:
        return self._dims

    def current(self) -> ClusterState:
        """The state as of the last event: only what changed since the last call is
        recomputed. Valid until the next `apply`."""
        if self._state is not None and self._state_generation == self.generation:
            return self._state
        previous = self._state
        touched = {name for name in self._dirty_nodes if name in self._infos}
        for name in self._dirty_nodes:
            if name in self._infos:
                pods = list(self._on_node[name].values())
                self._nodes[name] = node_state(
                    self._infos[name], pods, self._vectors, self._pdb_matches, self._dims
                )
            else:
                self._nodes.pop(name, None)
        if self._node_set_changed:
            self._names = tuple(sorted(self._nodes))
            self._rows = [screen_row(name, self._nodes[name]) for name in self._names]
            self._row_at = {name: i for i, name in enumerate(self._names)}
        else:
            for name in touched:
                self._rows[self._row_at[name]] = screen_row(name, self._nodes[name])
        for name in self._dirty_nominated:
            keys = self._nominees.get(name)
            if keys and name in self._infos:
                ordered = sorted((self._pods[k] for k in keys), key=importance_key)
                self._nominated[name] = tuple(ordered)
            else:
                self._nominated.pop(name, None)
        for group in self._dirty_groups:
            keys = self._members.get(group)
            if keys:
                self._group_members[group] = frozenset(keys)
            else:
                self._group_members.pop(group, None)
        state = ClusterState(
            dims=self._dims,
            nodes=self._nodes,
            node_names=self._names,
            rows=tuple(self._rows),
            pods=self._pods,
            vectors=self._vectors,
            groups=self._groups,
            pdbs=self._pdbs,
            pdb_matches=self._pdb_matches,
            nominated=self._nominated,
            owner_refs=self._owner_refs,
        )
        self._carry_memo(previous, state, touched)
        self._state, self._state_generation = state, self.generation
        self._dirty_nodes, self._dirty_nominated, self._dirty_groups = set(), set(), set()
        self._node_set_changed = self._dims_changed = False
        self._unit_pods, self._unit_groups = set(), set()
        return state

    def _carry_memo(self, previous: ClusterState | None, state: ClusterState, touched: set[str]) -> None:
        """The previous state's derived indexes, patched or kept where still valid; the
        strict screening table always (every decision screens with it)."""
        old = previous.memo if previous is not None else {}
        full = self._node_set_changed or self._dims_changed
        state.memo["group_members"] = self._group_members
        state.memo["labels"] = self._labels
        for key, value in old.items():
            if key.startswith("table:") and isinstance(value, ScreenTable) and not full:
                state.memo[key] = value.patched(state, touched)
            elif key.startswith("units:") and isinstance(value, UnitIndex) and not self._dims_changed:
                if self._unit_pods or self._unit_groups:
                    value = patch_unit_index(
                        value,
                        state,
                        self._unit_pods,
                        self._unit_groups,
                        include_opted_out=key == "units:True",
                    )
                if value is not None:
                    state.memo[key] = value
        if "table:False" not in state.memo:
            state.memo["table:False"] = ScreenTable(state, include_opted_out=False)

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
        self._pdb_matches[pod.key] = self._match(pod)
        self._dirty_nodes.add(pod.node_name)
        self._unit_change(pod)

    def _unit_change(self, pod: PodInfo) -> None:
        self._unit_pods.add(pod.key)
        if pod.group:
            self._unit_groups.add(pod.group)

    def _unlink(self, pod: PodInfo) -> None:
        key = pod.key
        del self._pods[key]
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
        slot = self._pdb_slot.get(key)
        old = self._pdb_slots[slot] if slot is not None else None
        if old == pdb:
            return False
        if (
            old is not None
            and pdb is not None
            and (old.selector, old.disrupted_pods)
            == (
                pdb.selector,
                pdb.disrupted_pods,
            )
        ):
            # Only the allowance moved (the disruption controller's usual update): the same
            # pods match; decisions read the allowance from ClusterState.pdbs.
            assert slot is not None
            self._set_slot(slot, pdb)
            return True
        if pdb is None:
            assert slot is not None and old is not None
            self._set_slot(slot, _NO_PDB)
            del self._pdb_slot[key]
            _remove_slot(self._pdbs_by_namespace, old.namespace, slot)
        elif slot is None:
            slot = next((i for i, p in enumerate(self._pdb_slots) if p is _NO_PDB), len(self._pdb_slots))
            if slot == len(self._pdb_slots):
                self._pdb_slots.append(pdb)
            self._set_slot(slot, pdb)
            self._pdb_slot[key] = slot
            self._pdbs_by_namespace.setdefault(pdb.namespace, []).append(slot)
            self._pdbs_by_namespace[pdb.namespace].sort()
        else:
            self._set_slot(slot, pdb)
        namespace = pdb.namespace if pdb is not None else old.namespace  # type: ignore[union-attr]
        self._rematch(namespace)
        return True

    def _set_slot(self, slot: int, pdb: PDBInfo) -> None:
        self._pdb_slots[slot] = pdb
        self._pdbs = tuple(self._pdb_slots)

    def _match(self, pod: PodInfo) -> tuple[int, ...]:
        return pdb_indices(pod, self._pdbs, self._pdbs_by_namespace.get(pod.namespace, ()))

    def _rematch(self, namespace: str) -> None:
        """PDB matches of the bound pods of `namespace`, after a PDB there changed."""
        for key, matches in list(self._pdb_matches.items()):
            pod = self._pods[key]
            if pod.namespace != namespace:
                continue
            new = self._match(pod)
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


def _remove_slot(index: dict[str, list[int]], namespace: str, slot: int) -> None:
    slots = index.get(namespace)
    if slots is not None and slot in slots:
        slots.remove(slot)
        if not slots:
            del index[namespace]


def _discard(index: dict[str, set[str]], name: str, key: str) -> None:
    keys = index.get(name)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[name]
