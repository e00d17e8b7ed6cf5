"""The shared acceptance scenarios (copied into tests/data/preemption) and their outcomes.

expected.json names fields as `python -m controller simulate` prints them; the engine's typed
outcomes are compared with it here, the printing is tested in test_simulate_cli.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from priogate.preemption.engine import simulate
from priogate.preemption.policy import PreemptionPolicy
from priogate.preemption.snapshot import build_snapshot, load_objects
from priogate.slim import slim_node, slim_pod
from tests.unit.preemption.outcomes import outcomes

DATA = Path(__file__).resolve().parents[2] / "data" / "preemption"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def test_every_scenario_file_has_an_expectation():
    files = {p.stem for p in DATA.glob("*.json")} - {"expected"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("opt_out_mode", ["hard", "soft"])
def test_acceptance_scenario(name, opt_out_mode):
    found = outcomes(
        load_objects((DATA / f"{name}.json").read_text()), policy=PreemptionPolicy(opt_out_mode=opt_out_mode)
    )
    decisions = [o for o in found if o.status == "preempt"]
    want = EXPECTED[name]["expected"]
    got = [
        {"preemptor": o.preemptor, "nominatedNode": o.node, "victims": [v.key for v in o.victims]}
        for o in decisions
    ]
    assert got == want["decisions"]
    assert [o.preemptor for o in found if o.status == "unresolved"] == want.get("unresolved", [])
    for decision in decisions:
        assert decision.placements == {decision.preemptor: decision.node}
        assert decision.reason


def test_explain_does_not_change_decisions():
    for name in EXPECTED:
        snapshot = build_snapshot(load_objects((DATA / f"{name}.json").read_text()))
        plain = simulate(snapshot)
        explained = simulate(snapshot, explain=True)
        stripped = [dataclasses.replace(o, nodes=None) for o in explained.outcomes]
        assert stripped == list(plain.outcomes)
        shown = explained.to_json(explain=True)
        for section in ("decisions", "unresolved"):
            assert all("nodes" in e for e in shown[section])


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
    assert outcomes(slimmed) == outcomes(live)
