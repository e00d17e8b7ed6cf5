"""`python -m controller simulate`: input forms, output shape, and bad input (exit 2, one
line on stderr, never a traceback)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.__main__ import main
from tests.builders import node, pdb, pod, podgroup

DATA = Path(__file__).resolve().parents[2] / "data" / "preemption"
ROOT = Path(__file__).resolve().parents[3]


def cli(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        code = main(argv)
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def as_list(*items: dict) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


SCENARIO = as_list(
    node("n", cpu="4"), pod("low", priority=1, cpu="4", node="n"), pod("p", priority=100, cpu="2")
)


def test_json_file():
    code, out, err = cli(["simulate", str(DATA / "seed-minimal-victims.json")])
    assert code == 0 and err == ""
    result = json.loads(out)
    assert set(result) == {"decisions", "unresolved", "stats", "notModelled"}
    assert result["decisions"][0] == {
        "preemptor": "default/preemptor",
        "nominatedNode": "node-1",
        "placements": {"default/preemptor": "node-1"},
        "victims": ["default/p2"],
        "reason": result["decisions"][0]["reason"],
    }
    assert result["stats"]["nodes"] == 1 and result["stats"]["pods"] == 5
    assert result["stats"]["decisionSeconds"] >= 0


def test_yaml_from_stdin_and_explain():
    code, out, _ = cli(["simulate", "-", "--explain"], stdin=yaml.safe_dump(SCENARIO))
    assert code == 0
    decision = json.loads(out)["decisions"][0]
    assert decision["victims"] == ["default/low"]
    assert decision["nodes"] == {"n": "chosen"}


def test_multi_document_yaml_and_kind_specific_lists():
    docs = [
        {"kind": "NodeList", "items": [node("n", cpu="4")]},
        {"kind": "PodList", "items": [pod("low", priority=1, cpu="4", node="n")]},
        pod("p", priority=100, cpu="2"),
        {"kind": "Service", "metadata": {"name": "ignored"}},
    ]
    code, out, _ = cli(["simulate", "-"], stdin=yaml.safe_dump_all(docs))
    assert code == 0
    assert json.loads(out)["decisions"][0]["victims"] == ["default/low"]


def test_opt_out_mode_flag():
    opted = as_list(
        node("n", cpu="4"),
        pod("o", priority=1, cpu="4", node="n", labels={"priogate.io/allow-preemption": "false"}),
        pod("p", priority=100, cpu="2"),
    )
    _, hard, _ = cli(["simulate", "-"], stdin=json.dumps(opted))
    _, soft, _ = cli(["simulate", "-", "--opt-out-mode", "soft"], stdin=json.dumps(opted))
    assert json.loads(hard)["decisions"] == []
    assert json.loads(soft)["decisions"][0]["victims"] == ["default/o"]


def test_policy_flags_reach_the_engine():
    guarded = as_list(
        node("n", cpu="4"),
        pod("g", priority=1, cpu="4", node="n", labels={"app": "g"}),
        pdb("guard", match_labels={"app": "g"}, allowed=0),
        pod("p", priority=100, cpu="2"),
    )
    _, best_effort, _ = cli(["simulate", "-"], stdin=json.dumps(guarded))
    _, strict, _ = cli(["simulate", "-", "--pdb-mode", "strict", "--qos-order"], stdin=json.dumps(guarded))
    assert json.loads(best_effort)["decisions"][0]["victims"] == ["default/g"]
    (pending,) = json.loads(strict)["unresolved"]
    assert pending["reason"].startswith("cannot preempt without violating a PodDisruptionBudget")
    # the start delay reads the wall clock of the caller: a pod never marked unschedulable waits
    _, delayed, _ = cli(["simulate", "-", "--preemption-start-delay", "5"], stdin=json.dumps(SCENARIO))
    assert "waiting for --preemption-start-delay 5s" in json.loads(delayed)["unresolved"][0]["reason"]
    code, _, err = cli(["simulate", "-", "--max-victims", "-1"], stdin=json.dumps(SCENARIO))
    assert code == 2 and "max victims" in err


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{not json", "cannot parse snapshot"),
        ("key: [unclosed", "cannot parse snapshot"),
        ("42", "snapshot must be a Kubernetes List"),
        (json.dumps({"kind": "List", "items": [5]}), "item 0: expected an object"),
        (json.dumps(as_list({"metadata": {"name": "x"}})), "item 0: missing kind"),
        (json.dumps(as_list({"kind": "Pod", "metadata": {}})), "Pod without metadata.name"),
        (json.dumps(as_list(pod("p", priority=1, cpu="lots"))), "invalid quantity 'lots'"),
        (json.dumps(as_list(pod("p", priority=1, cpu="-1"))), "negative request for cpu"),
        (json.dumps(as_list(node("n", cpu="four"))), "Node n allocatable: cpu: invalid quantity"),
        (json.dumps(as_list(pod("p", priority="high", cpu="1"))), "spec.priority must be an integer"),
        (
            json.dumps(as_list(pod("p", priority=1, cpu="1", preemption_policy="Sometimes"))),
            "unsupported preemptionPolicy",
        ),
        (
            json.dumps(as_list(pod("p", priority=1, cpu="1"), pod("p", priority=1, cpu="1"))),
            "Pod default/p appears twice",
        ),
        (
            json.dumps(
                as_list(
                    pod(
                        "p",
                        priority=1,
                        cpu="1",
                        node_affinity=[{"matchExpressions": [{"key": "k", "operator": "Near"}]}],
                    )
                )
            ),
            "unsupported operator 'Near'",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(stdin, message):
    code, out, err = cli(["simulate", "-"], stdin=stdin)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("simulate: ")
    assert message in err


def test_bad_timestamp():
    bad = pod("p", priority=1, cpu="1", node="n")
    bad["status"]["startTime"] = "yesterday"
    code, _, err = cli(["simulate", "-"], stdin=json.dumps(as_list(node("n"), bad)))
    assert code == 2 and "invalid RFC 3339 time 'yesterday'" in err


def test_missing_file():
    code, _, err = cli(["simulate", "/nonexistent/snapshot.yaml"])
    assert code == 2 and "cannot read /nonexistent/snapshot.yaml" in err


def test_module_entry_point_runs():
    done = subprocess.run(
        [sys.executable, "-m", "controller", "simulate", "-"],
        input="{broken",
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stderr.startswith("simulate: ")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.text(max_size=4)
    | st.sampled_from(["1", "2Gi", "Never"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_mangled_snapshot_gives_a_result_or_one_line_error(data):
    snapshot = json.loads(json.dumps(SCENARIO))
    snapshot["items"].append(pdb("x", match_labels={"app": "a"}))
    snapshot["items"].append(podgroup("g", min_member=2, phase="Inqueue"))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(snapshot)[1:]))
        target = snapshot
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = data.draw(JSON_VALUES)
    code, out, err = cli(["simulate", "-"], stdin=json.dumps(snapshot))
    assert code in (0, 2), err
    if code == 2:
        assert out == "" and err.startswith("simulate: ") and err.count("\n") == 1
    else:
        assert set(json.loads(out)) == {"decisions", "unresolved", "stats", "notModelled"}


def test_a_reader_that_leaves_early_gets_no_traceback():
    big = as_list(*(node(f"n{i:04d}", cpu="1") for i in range(1500)), pod("p", priority=100, cpu="2"))
    reader = subprocess.Popen(
        [sys.executable, "-m", "controller", "simulate", "-", "--explain"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert reader.stdin is not None and reader.stdout is not None and reader.stderr is not None
    reader.stdin.write(json.dumps(big).encode())
    reader.stdin.close()
    assert reader.stdout.read(10) == b'{\n  "decis'
    reader.stdout.close()  # like `| head`
    reader.wait(timeout=60)
    assert b"Traceback" not in reader.stderr.read()
