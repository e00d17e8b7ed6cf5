"""The world the live-state tests drive: the objects a stream of watch events leaves, and the
assertions that the live state decides as a fresh build of them (test_live, test_live_cases)."""

from __future__ import annotations

from typing import Any

from priogate.preemption.engine import decide_group, prepare, run
from priogate.preemption.gang_fit import anti_pods
from priogate.preemption.labels import build_label_index
from priogate.preemption.live import LiveClusterState
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import Snapshot
from priogate.preemption.state import ClusterState
from priogate.preemption.units import UnitIndex, _build
from tests.builders import EPOCH

KINDS = ("nodes", "pods", "podgroups", "pdbs", "classes")
ARGUMENT = {kind: "priority_classes" if kind == "classes" else kind for kind in KINDS}
GROUPS = ("g0", "g1")
NODES = ("n0", "n1", "n2", "n3")  # n3 starts absent: pods may be bound to it before it exists
GPU = "example.com/gpu"


class World:
    """The objects the events leave, per kind and key, with whether each is malformed."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, tuple[dict[str, Any], bool]]] = {k: {} for k in KINDS}
        self.created = 100  # names of pods created by events

    def put(self, kind: str, key: str, obj: dict[str, Any], bad: bool = False) -> None:
        self.objects[kind][key] = (obj, bad)

    def _by_argument(self, keep_malformed: bool) -> dict[str, list[dict[str, Any]]]:
        """The objects per keyword of Snapshot.from_objects and LiveClusterState."""
        return {
            ARGUMENT[kind]: [o for o, bad in objects.values() if keep_malformed or not bad]
            for kind, objects in self.objects.items()
        }

    def fresh(self) -> ClusterState:
        return prepare(Snapshot.from_objects(**self._by_argument(keep_malformed=False)))

    def live(self) -> LiveClusterState:
        return LiveClusterState(**self._by_argument(keep_malformed=True))


def _normalized(index: UnitIndex) -> tuple:
    """A unit index with ranks replaced by positions: ranks only order units."""
    at = {rank: i for i, rank in enumerate(index.ranks)}
    return (
        [(u.key, u.priority, u.group, u.pods) for u in index.units],
        index.orders,
        index.neg_priority,
        {node: ([at[r] for r in rows.ranks], rows.cum) for node, rows in index.per_node.items()},
        [(at[r], node) for r, node in index.by_last],
        [at[r] for r in index.pdb_ranks],
        [at[r] for r in index.opted_ranks],
        {key: at[r] for key, r in index.rank_of.items()},
        index.unit_of_pod,
        {i: [(at[r], p.key) for r, p in members] for i, members in index.pdb_members.items()},
        {at[r]: pdbs for r, pdbs in index.pdbs_of_rank.items()},
        all(u.rank == r and index.unit_at[r] is u for u, r in zip(index.units, index.ranks, strict=True))
        and len(index.unit_at) == len(index.units)
        and index.first_below(-(2**40)) < index.stride,
    )


def assert_patched_units_are_built_units(state: ClusterState) -> None:
    for variant in (False, True):
        patched = state.memo.get(f"units:{variant}")
        if patched is not None:
            assert _normalized(patched) == _normalized(_build(state, variant))


# Every optional policy on at once: the facts they read (QoS class, owner/driver pods,
# unschedulable since) must be as current in the live state as in a fresh build.
SHAPED = PreemptionPolicy(
    opt_out_mode="soft",
    gang_aware_victims=True,
    victim_classes=True,
    qos_order=True,
    start_delay=5,
    victim_selection=("single", "multiple", "kube-scheduler"),
    max_victims=2,
    pdb_mode="strict",
)
NOW = EPOCH.timestamp() + 20


def assert_same_decisions(live: ClusterState, fresh: ClusterState) -> None:
    assert_patched_units_are_built_units(live)
    assert live.memo["labels"].namespaces == build_label_index(fresh.bound_pods()).namespaces
    assert live.owner_refs == fresh.owner_refs
    assert anti_pods(live) == anti_pods(fresh)
    for mode in ("hard", "soft"):
        policy = PreemptionPolicy(opt_out_mode=mode)
        assert run(live, policy=policy, explain=True) == run(fresh, policy=policy, explain=True)
        for group in fresh.groups:
            assert decide_group(live, group, policy=policy) == decide_group(fresh, group, policy=policy)
    assert run(live, policy=SHAPED, explain=True, now=NOW) == run(fresh, policy=SHAPED, explain=True, now=NOW)
