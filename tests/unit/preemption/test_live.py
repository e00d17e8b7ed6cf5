"""The live state: after any sequence of watch events, decisions on LiveClusterState.current()
equal those on a fresh prepare(Snapshot.from_objects(...)) of the objects the events leave
(malformed ones counting as absent). A property test over random event streams, then the
tricky cases one by one.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from priogate.preemption import units
from priogate.preemption.engine import decide_group, prepare, run
from priogate.preemption.labels import build_label_index
from priogate.preemption.live import LiveClusterState
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import Snapshot
from priogate.preemption.state import ClusterState
from priogate.preemption.units import UnitIndex, _build
from tests.builders import EPOCH, node, pdb, pod, podgroup, priority_class, ts

KINDS = ("nodes", "pods", "podgroups", "pdbs", "classes")
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

    def fresh(self) -> ClusterState:
        good = {k: [o for o, bad in v.values() if not bad] for k, v in self.objects.items()}
        snapshot = Snapshot.from_objects(
            nodes=good["nodes"],
            pods=good["pods"],
            podgroups=good["podgroups"],
            pdbs=good["pdbs"],
            priority_classes=good["classes"],
        )
        return prepare(snapshot)

    def live(self) -> LiveClusterState:
        every = {k: [o for o, _ in v.values()] for k, v in self.objects.items()}
        return LiveClusterState(
            nodes=every["nodes"],
            pods=every["pods"],
            podgroups=every["podgroups"],
            pdbs=every["pdbs"],
            priority_classes=every["classes"],
        )


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
    for mode in ("hard", "soft"):
        policy = PreemptionPolicy(opt_out_mode=mode)
        assert run(live, policy=policy, explain=True) == run(fresh, policy=policy, explain=True)
        for group in fresh.groups:
            assert decide_group(live, group, policy=policy) == decide_group(fresh, group, policy=policy)
    assert run(live, policy=SHAPED, explain=True, now=NOW) == run(fresh, policy=SHAPED, explain=True, now=NOW)


# ---- the property ----------------------------------------------------------------------------

CPU = st.sampled_from(["250m", "500m", "1000m", "1500m", "2000m"])
PRIORITY = st.sampled_from([0, 1, 5, 10, 20])


@st.composite
def a_node(draw: st.DrawFn, name: str) -> tuple[dict[str, Any], bool]:
    if draw(st.integers(0, 15)) == 0:
        bad = node(name)
        bad["status"]["allocatable"]["cpu"] = "lots"
        return bad, True
    taint = draw(st.sampled_from([None, None, "NoSchedule"]))
    obj = node(
        name,
        cpu=draw(st.sampled_from(["2", "3", "4"])),
        pods=draw(st.sampled_from([3, 110])),
        allocatable={GPU: "2"} if draw(st.integers(0, 5)) == 0 else None,
        labels={"zone": draw(st.sampled_from(["a", "b"]))},
        taints=[{"key": "dedicated", "value": "x", "effect": taint}] if taint else None,
        unschedulable=draw(st.integers(0, 5)) == 0,
    )
    return obj, False


@st.composite
def a_pod(draw: st.DrawFn, name: str) -> tuple[dict[str, Any], bool]:
    if draw(st.integers(0, 20)) == 0:
        return pod(name, cpu="-1"), True
    where = draw(st.sampled_from(["pending", "pending", "bound", "bound", "bound"]))
    kind = draw(st.sampled_from(["plain"] * 6 + ["daemon", "terminating", "done", "opted", "classed"]))
    labels = {"app": draw(st.sampled_from(["a", "b"]))}
    if kind == "opted":
        labels["priogate.io/allow-preemption"] = "false"
    group = draw(st.sampled_from([None, None, *GROUPS]))
    qos = draw(st.sampled_from(["burstable", "burstable", "guaranteed", "best-effort"]))
    obj = pod(
        name,
        priority=None if kind == "classed" else draw(PRIORITY),
        priority_class=draw(st.sampled_from(["low", "high", "gone"])) if kind == "classed" else None,
        cpu=None if qos == "best-effort" else draw(CPU),
        limits={"cpu": "2", "memory": "1Gi"} if qos == "guaranteed" else None,
        requests={GPU: "1"} if draw(st.integers(0, 9)) == 0 else None,
        node=draw(st.sampled_from(NODES)) if where == "bound" else None,
        started=draw(st.integers(0, 20)),
        created=draw(st.integers(0, 5)),
        labels=labels,
        group=group,
        owner="DaemonSet" if kind == "daemon" else None,
        deleting=kind == "terminating",
        preempted=kind == "terminating",
        phase="Succeeded" if kind == "done" else None,
        nominated=draw(st.sampled_from([None, None, *NODES])) if where == "pending" else None,
        tolerations=[{"key": "dedicated", "operator": "Exists"}] if draw(st.booleans()) else None,
    )
    if draw(st.integers(0, 3)) == 0:  # hard topology spread over the nodes' zones
        obj["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": draw(st.sampled_from([1, 2])),
                "topologyKey": draw(st.sampled_from(["zone", "zone", "rack"])),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": draw(st.sampled_from(["a", "b"]))}},
                "minDomains": draw(st.sampled_from([1, 1, 3])),
            }
        ]
    if draw(st.integers(0, 3)) == 0:  # an executor naming its driver pod (maybe not there)
        driver = draw(st.sampled_from(["p0", "p1", "p2", "p100", "p101"]))
        obj["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": driver, "apiVersion": "v1", "uid": "u"}]
    if where == "pending" and draw(st.booleans()):
        obj.setdefault("status", {"phase": "Pending"})["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": ts(draw(st.sampled_from([0, 10, 18]))),
            }
        ]
    return obj, False


@st.composite
def an_event(draw: st.DrawFn, world: World) -> tuple[str, str, dict[str, Any]]:
    """One event, already applied to `world`."""
    kind = draw(st.sampled_from(["pods"] * 6 + ["nodes"] * 2 + ["podgroups", "pdbs", "classes"]))
    existing = sorted(world.objects[kind])
    delete = existing and draw(st.integers(0, 4)) == 0
    if delete:
        key = draw(st.sampled_from(existing))
        obj, _ = world.objects[kind].pop(key)
        return kind, "DELETED", obj
    if kind == "pods":
        key = draw(st.sampled_from([*existing, "p-new"] if existing else ["p-new"]))
        name = f"p{world.created}" if key == "p-new" else key.split("/")[1]
        world.created += 1
        old = world.objects["pods"].get(f"default/{name}")
        if old is not None and not old[1] and draw(st.booleans()):
            obj = copy.deepcopy(old[0])  # bind, start terminating, or a status-only update
            change = draw(st.sampled_from(["bind", "terminate", "status"]))
            if change == "bind" and not obj["spec"].get("nodeName"):
                obj["spec"]["nodeName"] = draw(st.sampled_from(NODES))
                obj["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:09Z"}
            elif change == "terminate":
                obj["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
            else:
                obj.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
            bad = False
        else:
            obj, bad = draw(a_pod(name))
    elif kind == "nodes":
        name = draw(st.sampled_from(NODES))
        old = world.objects["nodes"].get(name)
        if old is not None and not old[1] and draw(st.booleans()):
            obj, bad = copy.deepcopy(old[0]), False  # a heartbeat
            obj["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "2026-01-01T00:01:00Z"}]
        else:
            obj, bad = draw(a_node(name))
    elif kind == "podgroups":
        name = draw(st.sampled_from(GROUPS))
        obj = podgroup(
            name,
            min_member=draw(st.integers(1, 3)),
            phase=draw(st.sampled_from(["Inqueue", "Running", "Pending"])),
            priority_class=draw(st.sampled_from([None, "high"])),
        )
        bad = False
    elif kind == "pdbs":
        name = draw(st.sampled_from(["pdb0", "pdb1"]))
        obj = pdb(
            name, match_labels={"app": draw(st.sampled_from(["a", "b"]))}, allowed=draw(st.integers(0, 2))
        )
        bad = False
    else:
        name = draw(st.sampled_from(["low", "high"]))
        obj = priority_class(name, value=draw(st.sampled_from([1, 15, 30])), default=draw(st.booleans()))
        bad = False
    world.put(kind, f"default/{name}" if kind in ("pods", "podgroups", "pdbs") else name, obj, bad)
    return kind, "MODIFIED" if draw(st.booleans()) else "ADDED", obj


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_live_state_decides_as_a_fresh_build(data: st.DataObject) -> None:
    world = World()
    for name in NODES[:3]:
        world.put("nodes", name, *data.draw(a_node(name)))
    for i in range(data.draw(st.integers(0, 6))):
        world.put("pods", f"default/p{i}", *data.draw(a_pod(f"p{i}")))
    live = world.live()
    live.current()
    for _ in range(data.draw(st.integers(1, 25))):
        kind, event_type, obj = data.draw(an_event(world))
        live.apply(kind, event_type, obj)
        if data.draw(st.integers(0, 3)) == 0:  # decide mid-stream too: memo carried across
            assert_same_decisions(live.current(), world.fresh())
    assert_same_decisions(live.current(), world.fresh())


# ---- the tricky cases --------------------------------------------------------------------------


def _cluster() -> World:
    world = World()
    world.put("nodes", "n0", node("n0", cpu="2"))
    world.put("nodes", "n1", node("n1", cpu="2"))
    world.put("pods", "default/low", pod("low", priority=1, cpu="1500m", node="n0", labels={"app": "a"}))
    world.put("pods", "default/mid", pod("mid", priority=5, cpu="1500m", node="n1", labels={"app": "b"}))
    world.put("pods", "default/urgent", pod("urgent", priority=10, cpu="1"))
    return world


def _step(
    world: World, live: LiveClusterState, kind: str, key: str, obj: dict, event: str = "MODIFIED"
) -> bool:
    if event == "DELETED":
        world.objects[kind].pop(key)
    else:
        world.put(kind, key, obj)
    return live.apply(kind, event, obj)


def _victims(state: ClusterState) -> list[list[str]]:
    return [[v.key for v in o.victims] for o in run(state) if o.status == "preempt"]


def test_an_unchanged_heartbeat_changes_nothing_and_keeps_the_state() -> None:
    world = _cluster()
    live = world.live()
    before = live.current()
    beat = node("n0", cpu="2")
    beat["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "2026-01-01T00:05:00Z"}]
    assert not live.apply("nodes", "MODIFIED", beat)
    assert live.current() is before


def test_a_pod_bound_to_an_unknown_node_counts_once_the_node_appears() -> None:
    world = _cluster()
    live = world.live()
    _step(world, live, "pods", "default/early", pod("early", priority=0, cpu="1", node="n9"))
    assert "default/early" not in {p.key for p in live.current().bound_pods()}
    _step(world, live, "nodes", "n9", node("n9", cpu="1"), "ADDED")
    state = live.current()
    assert "default/early" in {p.key for p in state.nodes["n9"].pods}
    assert _victims(state) == [["default/early"]]
    assert_same_decisions(state, world.fresh())
    _step(world, live, "nodes", "n9", node("n9", cpu="1"), "DELETED")
    assert_same_decisions(live.current(), world.fresh())


def test_a_bind_moves_the_pod_from_pending_to_its_node() -> None:
    world = _cluster()
    live = world.live()
    assert _victims(live.current()) == [["default/low"]]
    bound = pod("urgent", priority=10, cpu="1", node="n1")
    _step(world, live, "pods", "default/urgent", bound)
    state = live.current()
    assert _victims(state) == []
    assert "default/urgent" in {p.key for p in state.nodes["n1"].pods}
    assert_same_decisions(state, world.fresh())


def test_a_terminating_victim_is_free_space_not_a_victim() -> None:
    world = _cluster()
    live = world.live()
    leaving = pod("low", priority=1, cpu="1500m", node="n0", deleting=True, preempted=True)
    _step(world, live, "pods", "default/low", leaving)
    state = live.current()
    assert state.nodes["n0"].terminating.pods and not state.nodes["n0"].victims_strict.pods
    assert_same_decisions(state, world.fresh())


def test_a_nominated_pod_holds_its_node_and_lets_go_when_bound_elsewhere() -> None:
    world = _cluster()
    live = world.live()
    _step(world, live, "pods", "default/held", pod("held", priority=20, cpu="1", nominated="n0"), "ADDED")
    state = live.current()
    assert [p.key for p in state.nominated["n0"]] == ["default/held"]
    assert_same_decisions(state, world.fresh())
    _step(world, live, "pods", "default/held", pod("held", priority=20, cpu="1", node="n1"))
    state = live.current()
    assert "n0" not in state.nominated
    assert_same_decisions(state, world.fresh())


def test_pdb_matches_follow_selector_changes_and_deletions() -> None:
    world = _cluster()
    live = world.live()
    _step(world, live, "pdbs", "default/keep-a", pdb("keep-a", match_labels={"app": "a"}), "ADDED")
    state = live.current()
    assert [state.pdbs[i].key for i in state.pdb_matches["default/low"]] == ["default/keep-a"]
    assert_same_decisions(state, world.fresh())
    _step(world, live, "pdbs", "default/keep-a", pdb("keep-a", match_labels={"app": "b"}))
    state = live.current()
    assert state.pdb_matches["default/low"] == ()
    assert [state.pdbs[i].key for i in state.pdb_matches["default/mid"]] == ["default/keep-a"]
    assert_same_decisions(state, world.fresh())
    # an allowance update alone keeps the matches and the node aggregates
    nodes = dict(state.nodes)
    _step(world, live, "pdbs", "default/keep-a", pdb("keep-a", match_labels={"app": "b"}, allowed=1))
    state = live.current()
    assert state.pdbs[state.pdb_matches["default/mid"][0]].disruptions_allowed == 1
    assert all(state.nodes[n] is nodes[n] for n in nodes)
    _step(world, live, "pdbs", "default/keep-a", pdb("keep-a", match_labels={"app": "b"}), "DELETED")
    state = live.current()
    assert state.pdb_matches["default/mid"] == ()
    assert_same_decisions(state, world.fresh())


def test_a_new_extended_resource_widens_every_vector() -> None:
    world = _cluster()
    live = world.live()
    live.current()
    _step(world, live, "nodes", "n2", node("n2", cpu="2", allocatable={GPU: "1"}), "ADDED")
    _step(
        world,
        live,
        "pods",
        "default/trainer",
        pod("trainer", priority=10, cpu="1", requests={GPU: "1"}),
        "ADDED",
    )
    state = live.current()
    assert GPU in state.dims and all(len(v) == len(state.dims) for v in state.vectors.values())
    assert_same_decisions(state, world.fresh())
    # the last user of the resource goes: the dimension stays, holding zeros, deciding nothing
    _step(world, live, "nodes", "n2", node("n2", cpu="2"), "DELETED")
    _step(world, live, "pods", "default/trainer", pod("trainer"), "DELETED")
    assert GPU in live.current().dims and GPU not in world.fresh().dims
    assert_same_decisions(live.current(), world.fresh())


def test_taints_and_cordoning_reach_the_screening_table() -> None:
    world = _cluster()
    live = world.live()
    live.current()
    tainted = node("n0", cpu="2", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    _step(world, live, "nodes", "n0", tainted)
    state = live.current()
    assert _victims(state) == [["default/mid"]]
    assert_same_decisions(state, world.fresh())
    _step(world, live, "nodes", "n0", node("n0", cpu="2"))
    assert_same_decisions(live.current(), world.fresh())


@pytest.mark.parametrize(
    ("kind", "bad"),
    [
        ("pods", pod("low", priority=1, cpu="lots", node="n0")),
        ("pods", {"metadata": {"name": "low", "namespace": "default"}, "spec": "not an object"}),
        ("nodes", {"metadata": {"name": "n0"}, "spec": {"taints": "nope"}}),
        ("pdbs", {"metadata": {"name": "x", "namespace": "default"}, "status": {"disruptionsAllowed": "1"}}),
        ("podgroups", {"metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": -1}}),
        ("classes", {"metadata": {"name": "low"}, "value": "high"}),
    ],
)
def test_a_malformed_object_is_skipped_with_a_reason_and_counts_as_absent(kind: str, bad: dict) -> None:
    world = _cluster()
    live = world.live()
    live.current()
    key = "default/low" if kind == "pods" else "n0" if kind == "nodes" else "low"
    world.objects[kind].pop(key, None)
    live.apply(kind, "MODIFIED", bad)
    assert live.skipped
    assert_same_decisions(live.current(), world.fresh())
    # and its deletion clears the note
    live.apply(kind, "DELETED", bad)
    assert not live.skipped


def test_a_priority_class_change_re_resolves_the_pods_that_name_it() -> None:
    world = _cluster()
    world.put("classes", "low", priority_class("low", value=1))
    world.put("pods", "default/classed", pod("classed", priority_class="low", cpu="1", node="n1"))
    live = world.live()
    assert live.current().pods["default/classed"].priority == 1
    _step(world, live, "classes", "low", priority_class("low", value=50))
    state = live.current()
    assert state.pods["default/classed"].priority == 50
    assert_same_decisions(state, world.fresh())
    _step(world, live, "classes", "low", priority_class("low", value=50), "DELETED")
    state = live.current()
    assert state.pods["default/classed"].priority_note
    assert_same_decisions(state, world.fresh())


def test_gang_decisions_keep_the_unit_index_current() -> None:
    world = _cluster()
    world.put("podgroups", "default/job", podgroup("job", min_member=2, phase="Inqueue"))
    for i in range(2):
        world.put("pods", f"default/job-{i}", pod(f"job-{i}", priority=10, cpu="1", group="job"))
    live = world.live()
    state = live.current()
    assert decide_group(state, "default/job") == decide_group(world.fresh(), "default/job")
    units = state.memo["units:False"]
    _step(world, live, "pods", "default/other", pod("other", priority=0, cpu="1"), "ADDED")
    state = live.current()
    assert state.memo["units:False"] is units  # a pending pod is no victim unit
    assert decide_group(state, "default/job") == decide_group(world.fresh(), "default/job")
    _step(world, live, "pods", "default/low", pod("low"), "DELETED")
    state = live.current()
    assert state.memo["units:False"] is units  # patched: the deleted pod's unit is gone
    assert "default/low" not in units.rank_of
    assert decide_group(state, "default/job") == decide_group(world.fresh(), "default/job")


@pytest.mark.parametrize(("gap", "step"), [(2, 1), (8, 1), (64, 4)])
def test_inserts_at_one_spot_outlast_the_rank_gaps(
    monkeypatch: pytest.MonkeyPatch, gap: int, step: int
) -> None:
    """Binds of ever later pods land at the end of their priority band, one after the other:
    when the gap runs out the index is built afresh, and decisions never change."""
    monkeypatch.setattr(units, "RANK_GAP", gap)
    monkeypatch.setattr(units, "RANK_STEP", step)
    world = _cluster()
    world.put("nodes", "n2", node("n2", cpu="32", pods=200))
    world.put("podgroups", "default/job", podgroup("job", min_member=2, phase="Inqueue"))
    for i in range(2):
        world.put("pods", f"default/job-{i}", pod(f"job-{i}", priority=10, cpu="20", group="job"))
    live = world.live()
    decide_group(live.current(), "default/job")
    for i in range(12):
        bound = pod(f"late-{i}", priority=1, cpu="1", node="n2", started=100 + i)
        _step(world, live, "pods", f"default/late-{i}", bound, "ADDED")
        state = live.current()
        assert_patched_units_are_built_units(state)
        assert decide_group(state, "default/job") == decide_group(world.fresh(), "default/job")
