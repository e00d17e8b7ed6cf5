"""The live state's tricky cases one by one: each event sequence leaves the same decisions as a
fresh build of the objects it leaves (the property over random streams: test_live.py).
"""

from __future__ import annotations

import pytest

from priogate.preemption import units
from priogate.preemption.engine import decide_group, run
from priogate.preemption.live import LiveClusterState
from priogate.preemption.state import ClusterState
from tests.builders import node, pdb, pod, podgroup, priority_class
from tests.unit.preemption.live_world import (
    GPU,
    World,
    assert_patched_units_are_built_units,
    assert_same_decisions,
)


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
