"""The engine's typed entry points: `Snapshot.from_objects` (API objects per kind, as the
controller's caches hold them) and `decide_for_group` (one PodGroup's decision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from priogate.preemption.engine import NOT_IN_SNAPSHOT, NOTHING_TO_PLACE, decide_for_group
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import KINDS, Snapshot, build_snapshot, load_objects
from tests.builders import node, pdb, pod, podgroup, priority_class

DATA = Path(__file__).resolve().parents[2] / "data" / "preemption"
ARGUMENT = {
    "Node": "nodes",
    "Pod": "pods",
    "PodGroup": "podgroups",
    "PodDisruptionBudget": "pdbs",
    "PriorityClass": "priority_classes",
}


def gang_scenario(phase: str = "Inqueue") -> list[dict]:
    return [
        node("n1"),
        pod("low", priority=1, cpu="4", node="n1", labels={"app": "x"}),
        pdb("x", match_labels={"app": "x"}, allowed=1),
        priority_class("high", value=100),
        podgroup("gang", min_member=1, priority_class="high", phase=phase),
        pod("g0", cpu="4", priority_class="high", group="gang"),
    ]


def per_kind(objects: list[dict], *, drop_kind: bool = False) -> dict[str, list[dict]]:
    """The objects as caches hold them: one list per kind, LIST items without `kind`."""
    sorted_ = {argument: [] for argument in ARGUMENT.values()}
    for obj in objects:
        if obj.get("kind") in ARGUMENT:
            item = {k: v for k, v in obj.items() if k != "kind"} if drop_kind else obj
            sorted_[ARGUMENT[obj["kind"]]].append(item)
    return sorted_


@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.json") if p.stem != "expected"))
def test_a_list_file_and_objects_per_kind_make_the_same_snapshot(name):
    objects = load_objects((DATA / f"{name}.json").read_text())
    assert Snapshot.from_objects(**per_kind(objects, drop_kind=True)) == build_snapshot(objects)


def test_per_kind_objects_need_no_kind():
    objects = gang_scenario()
    snapshot = Snapshot.from_objects(**per_kind(objects, drop_kind=True))
    assert snapshot == build_snapshot(objects)
    assert [p.key for p in snapshot.pods] == ["default/low", "default/g0"]
    assert snapshot.groups[0].priority == 100 and snapshot.pdbs[0].key == "default/x"


def test_the_list_reader_counts_kinds_it_does_not_read():
    objects = [*gang_scenario(), {"kind": "ConfigMap", "metadata": {"name": "c"}}]
    assert set(ARGUMENT) == set(KINDS)
    assert build_snapshot(objects).ignored_kinds == {"ConfigMap": 1}
    assert Snapshot.from_objects(**per_kind(objects)).ignored_kinds == {}


def test_bad_objects_per_kind_are_named():
    with pytest.raises(ValueError, match="Pod default/p appears twice"):
        Snapshot.from_objects(pods=[pod("p", priority=0, cpu="1"), pod("p", priority=0, cpu="1")])
    with pytest.raises(ValueError, match=r"Node without metadata\.name"):
        Snapshot.from_objects(nodes=[{"metadata": {}}])


def test_one_group_is_decided():
    outcome = decide_for_group(build_snapshot(gang_scenario()), "default/gang")
    assert outcome.status == "preempt"
    assert outcome.preemptor == "podgroup:default/gang"
    assert [v.key for v in outcome.victims] == ["default/low"]
    assert outcome.placements == {"default/g0": "n1"}
    assert outcome.node is None and outcome.nodes is None


def test_explain_adds_the_nodes_only():
    snapshot = build_snapshot(gang_scenario())
    plain = decide_for_group(snapshot, "default/gang")
    explained = decide_for_group(snapshot, "default/gang", explain=True)
    assert explained.nodes is not None and explained.nodes["n1"].startswith("chosen")
    assert (explained.status, explained.victims, explained.placements) == (
        plain.status,
        plain.victims,
        plain.placements,
    )


def test_a_pending_group_is_decided_when_asked():
    # simulate's run waits for Inqueue; the controller asks only for groups it found admitted,
    # so the engine does not second-guess a phase its snapshot may show stale.
    outcome = decide_for_group(build_snapshot(gang_scenario(phase="Pending")), "default/gang")
    assert outcome.status == "preempt"


def test_a_group_missing_from_the_snapshot():
    outcome = decide_for_group(build_snapshot(gang_scenario()), "default/other")
    assert (outcome.preemptor, outcome.status, outcome.reason) == (
        "podgroup:default/other",
        "unresolved",
        NOT_IN_SNAPSHOT,
    )


@pytest.mark.parametrize("phase", ["Completed", "Failed"])
def test_a_finished_group_has_nothing_to_place(phase):
    outcome = decide_for_group(build_snapshot(gang_scenario(phase=phase)), "default/gang")
    assert (outcome.status, outcome.reason, outcome.victims) == ("unresolved", NOTHING_TO_PLACE, ())


def test_a_complete_group_has_nothing_to_place():
    objects = [*gang_scenario(), pod("g1", cpu="1", priority_class="high", group="gang", node="n1")]
    outcome = decide_for_group(build_snapshot(objects), "default/gang")
    assert (outcome.status, outcome.reason) == ("unresolved", NOTHING_TO_PLACE)


def test_an_unknown_opt_out_mode_is_refused():
    with pytest.raises(ValueError, match="opt-out mode"):
        PreemptionPolicy(opt_out_mode="maybe")
