"""hack/upstream/verdict.py: the verdict from ginkgo's JSON report: a spec that passed only on a retry
is printed as FLAKY and counted, a spec that failed every attempt fails the run with the
namespace's last scheduling events, so CI's log says which pod waited and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hack.upstream.verdict import summarize

NAME = "[sig-scheduling] SchedulerPreemption [Serial] validates basic preemption works"
OTHER = (
    "[sig-scheduling] SchedulerPreemption [Serial] PodTopologySpread Preemption"
    " validates proper pods are preempted"
)
DUMP = (
    "I1128 11:11:58.183 22397 dump.go:53] At 2026-11-28 11:11:50 +0000 UTC - event for high: "
    "{default-scheduler } FailedScheduling: 0/2 nodes are available: 2 Insufficient example.com/fakePTSRes.\n"
    "I1128 11:11:58.190 22397 util.go:10] unrelated line\n"
)


def _spec(name: str, state: str, attempts: int = 1, output: str = "") -> dict[str, Any]:
    containers, leaf = name.rsplit(" validates", 1)
    return {
        "ContainerHierarchyTexts": [containers],
        "LeafNodeText": "validates" + leaf,
        "LeafNodeType": "It",
        "State": state,
        "NumAttempts": attempts,
        "RunTime": 2e9,
        "CapturedGinkgoWriterOutput": output,
        "Failure": {"Message": "Timed out after 120.000s."} if state != "passed" else {},
    }


def _summarize(tmp_path: Path, capsys: pytest.CaptureFixture[str], *specs: dict[str, Any]) -> tuple[int, str]:
    report = tmp_path / "report.json"
    report.write_text(json.dumps([{"SpecReports": list(specs)}]))
    code = summarize(report, [], 0, "default")
    return code, capsys.readouterr().out


def test_a_pass_on_a_retry_is_flaky_not_a_plain_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _summarize(tmp_path, capsys, _spec(NAME, "passed", attempts=2), _spec(OTHER, "passed"))
    assert code == 0
    assert f"FLAKY    {NAME} (passed on attempt 2" in out
    assert f"passed   {OTHER}" in out
    assert "upstream e2e: 2 passed (1 on a retry), 0 failed" in out


def test_a_spec_failing_every_attempt_fails_with_its_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _summarize(
        tmp_path, capsys, _spec(NAME, "passed"), _spec(OTHER, "failed", attempts=2, output=DUMP)
    )
    assert code == 1
    assert "upstream e2e: 1 passed, 1 failed" in out
    assert f"FAILED: {OTHER}" in out
    assert "event for high: {default-scheduler } FailedScheduling: 0/2 nodes are available" in out
    assert "unrelated line" not in out
