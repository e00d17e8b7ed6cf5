"""The live state's PDBs by slot. ClusterState refers to a PDB by its index in
ClusterState.pdbs (pdb_matches), so a deleted PDB leaves a free slot behind (one matching no
pod) rather than shifting every other's index; a new one takes the first free slot.
"""

from __future__ import annotations

from priogate.preemption.records import PDBInfo, PodInfo
from priogate.preemption.state import pdb_indices

_NO_PDB = PDBInfo(key="", namespace="", selector=None, disruptions_allowed=0, disrupted_pods=frozenset())
UNCHANGED = None
ALLOWANCE = ""  # only the allowance changed: every pod matches as before


class PDBSlots:
    def __init__(self) -> None:
        self.slots: list[PDBInfo] = []
        self.slot_of: dict[str, int] = {}  # PDB key -> slot
        self.pdbs: tuple[PDBInfo, ...] = ()  # the slots, as ClusterState.pdbs
        self.by_namespace: dict[str, list[int]] = {}  # ascending slots

    def put(self, key: str, pdb: PDBInfo | None) -> str | None:
        """Store (None: delete) the PDB `key`. Returns UNCHANGED, ALLOWANCE, or the namespace
        whose placed pods must be matched again."""
        slot = self.slot_of.get(key)
        old = self.slots[slot] if slot is not None else None
        if old == pdb:
            return UNCHANGED
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
            self._set(slot, pdb)
            return ALLOWANCE
        if pdb is None:
            assert slot is not None and old is not None
            self._set(slot, _NO_PDB)
            del self.slot_of[key]
            slots = self.by_namespace[old.namespace]
            slots.remove(slot)
            if not slots:
                del self.by_namespace[old.namespace]
            return old.namespace
        if slot is None:
            slot = next((i for i, p in enumerate(self.slots) if p is _NO_PDB), len(self.slots))
            if slot == len(self.slots):
                self.slots.append(pdb)
            self.slot_of[key] = slot
            self.by_namespace.setdefault(pdb.namespace, []).append(slot)
            self.by_namespace[pdb.namespace].sort()
        self._set(slot, pdb)
        return pdb.namespace

    def _set(self, slot: int, pdb: PDBInfo) -> None:
        self.slots[slot] = pdb
        self.pdbs = tuple(self.slots)

    def match(self, pod: PodInfo) -> tuple[int, ...]:
        """The slots of the PDBs counting the pod (state.pdb_indices over its namespace's)."""
        return pdb_indices(pod, self.pdbs, self.by_namespace.get(pod.namespace, ()))
