"""The engine's cluster state kept current from watch events, instead of rebuilt per decision.

The model is kube-scheduler's scheduler cache (pkg/scheduler/backend/cache): an event
updates the record of the one node it concerns and bumps that node's generation, and
UpdateSnapshot refreshes only the nodes whose generation moved since the last snapshot.
Here `apply` (live_records.LiveRecords) parses one object (parse.py, as Snapshot.from_objects
does), moves the pod between the per-node and per-label indexes and marks the nodes it
touched; `current` recomputes those nodes' aggregates (state.node_state, as apply_decision
does for a decision), patches their rows of the screening tables (ScreenTable.patched) and
the victim-unit index, and returns a ClusterState for engine.decide_group,
single.preempt_pod or engine.run.

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
  re-matches the placed pods of its namespace (found by the label index);
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

from priogate.preemption.live_records import LiveRecords
from priogate.preemption.records import PodInfo
from priogate.preemption.state import (
    ClusterState,
    NodeState,
    ScreenRow,
    importance_key,
    node_state,
    screen_row,
)
from priogate.preemption.table import ScreenTable
from priogate.preemption.units import UnitIndex, patch_unit_index


class LiveClusterState(LiveRecords):
    """ClusterState kept current by `apply(kind, event type, object)`; see the module doc."""

    def __init__(self, **objects: Iterable[Mapping[str, Any]]) -> None:
        """`objects`: the initial nodes, pods, podgroups, pdbs and priority_classes, as LiveRecords
        takes them."""
        super().__init__(**objects)
        # Derived, refreshed by `current` for what changed since the last call.
        self._nodes: dict[str, NodeState] = {}
        self._nominated: dict[str, tuple[PodInfo, ...]] = {}
        self._group_members: dict[str, frozenset[str]] = {}
        self._names: tuple[str, ...] = ()
        self._rows: list[ScreenRow] = []
        self._row_at: dict[str, int] = {}
        self._state: ClusterState | None = None
        self._state_generation = -1

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
        rows = previous.rows if previous is not None and not touched and not self._node_set_changed else None
        state = ClusterState(
            dims=self._dims,
            nodes=self._nodes,
            node_names=self._names,
            rows=tuple(self._rows) if rows is None else rows,  # a pod merely pending: the same rows
            pods=self._pods,
            vectors=self._vectors,
            groups=self._groups,
            pdbs=self._pdb_slots.pdbs,
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
        state.memo["anti_affinity"] = self._anti
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
