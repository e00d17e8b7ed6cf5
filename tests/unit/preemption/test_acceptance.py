"""The shared acceptance scenarios (copied into tests/data/preemption) and their outcomes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from priogate.preemption.engine import simulate
from priogate.preemption.snapshot import build_snapshot, load_objects
from priogate.slim import slim_node, slim_pod

DATA = Path(__file__).resolve().parents[2] / "data" / "preemption"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def test_every_scenario_file_has_an_expectation():
    files = {p.stem for p in DATA.glob("*.json")} - {"expected"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("opt_out_mode", ["hard", "soft"])
def test_acceptance_scenario(name, opt_out_mode):
    snapshot = build_snapshot(load_objects((DATA / f"{name}.json").read_text()))
    result = simulate(snapshot, opt_out_mode=opt_out_mode).to_json()
    want = EXPECTED[name]["expected"]
    got = [
        {"preemptor": d["preemptor"], "nominatedNode": d["nominatedNode"], "victims": d["victims"]}
        for d in result["decisions"]
    ]
    assert got == want["decisions"]
    assert [u["preemptor"] for u in result["unresolved"]] == want.get("unresolved", [])
    for decision in result["decisions"]:
        assert decision["placements"] == {decision["preemptor"]: decision["nominatedNode"]}
        assert decision["reason"]


def test_explain_does_not_change_decisions():
    for name in EXPECTED:
        snapshot = build_snapshot(load_objects((DATA / f"{name}.json").read_text()))
        plain = simulate(snapshot).to_json()
        explained = simulate(snapshot, explain=True).to_json(explain=True)
        for section in ("decisions", "unresolved"):
            stripped = [{k: v for k, v in e.items() if k != "nodes"} for e in explained[section]]
            assert stripped == plain[section]
            assert all("nodes" in e for e in explained[section])


def _with_unread_fields(obj: dict) -> dict:
    """The scenario's object as a live cluster would send it: managedFields, env, probes,
    volumes, container statuses, a node's images."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    if obj["kind"] == "Pod":
        for c in obj["spec"].get("containers", []):
            c.update(env=[{"name": "A", "value": "b"}], readinessProbe={"exec": {"command": ["true"]}})
        obj["spec"]["volumes"] = [{"name": "v", "emptyDir": {}}]
        obj.setdefault("status", {})["containerStatuses"] = [{"name": "c", "ready": True}]
    else:
        obj.setdefault("status", {})["images"] = [{"names": ["registry.example/app:1"], "sizeBytes": 1}]
    return obj


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_slimmed_caches_decide_the_same(name):
    slim = {"Pod": slim_pod, "Node": slim_node}
    live = [
        _with_unread_fields(o) if o.get("kind") in slim else o
        for o in load_objects((DATA / f"{name}.json").read_text())
    ]
    slimmed = [slim[o["kind"]](o) if o.get("kind") in slim else o for o in live]
    assert len(json.dumps(slimmed)) < len(json.dumps(live))
    want, got = simulate(build_snapshot(live)).to_json(), simulate(build_snapshot(slimmed)).to_json()
    for section in ("decisions", "unresolved"):
        assert got[section] == want[section]
