"""The shared acceptance scenarios (copied into tests/data/preemption) and their outcomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.preemption.engine import simulate
from controller.preemption.snapshot import build_snapshot, load_objects

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
