"""Recording and resuming gang preemption decisions."""

from __future__ import annotations

import pytest

from priogate.preemption_record import (
    ANNOTATION,
    RecordedDecision,
    Step,
    Victim,
    needs_preemption,
    next_step,
    recorded,
)

V1, V2 = Victim("ns", "low-1", "u1", "n1"), Victim("ns", "low-2", "u2", "n2")
DECIDED = RecordedDecision("abc", 1000.0, (V1, V2), {"m0": "n1", "m1": "n2"}, "place 2 member(s)")
APPLIED = DECIDED.done()


@pytest.mark.parametrize(
    ("decision", "needs", "present", "now", "want"),
    [
        (None, False, set(), 0, Step.IDLE),
        (None, True, set(), 0, Step.DECIDE),
        # a decision recorded but not finished is finished, whatever else holds: no new victims
        (DECIDED, True, {"u1", "u2"}, 1001, Step.RESUME),
        (DECIDED, False, set(), 5000, Step.RESUME),
        # applied: wait while its victims leave, and give the scheduler time
        (APPLIED, True, {"u2"}, 5000, Step.WAIT),
        (APPLIED, True, set(), 1010, Step.WAIT),
        (APPLIED, True, set(), 1030, Step.DECIDE),
        (APPLIED, False, set(), 5000, Step.IDLE),
    ],
)
def test_next_step(decision, needs, present, now, want):
    assert next_step(decision, needs, present, now, retry_after=30) == want


def test_annotation_round_trip():
    group = {"metadata": {"annotations": {ANNOTATION: DECIDED.to_annotation()}}}
    assert recorded(group) == DECIDED
    assert recorded({"metadata": {}}) is None
    with pytest.raises(ValueError, match="not a preemption record"):
        recorded({"metadata": {"annotations": {ANNOTATION: '{"id": 1}'}}})


def member(node: str = "", reason: str | None = "Unschedulable") -> dict:
    conditions = [] if reason is None else [{"type": "PodScheduled", "status": "False", "reason": reason}]
    return {"metadata": {}, "spec": {"nodeName": node}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("phase", "scheduled", "members", "want"),
    [
        ("Inqueue", 0, [member()], True),
        ("Unknown", 1, [member("n1", None), member()], True),
        ("Pending", 0, [member()], False),  # waits for the enqueue step
        ("Running", 3, [member()], False),
        ("Inqueue", 0, [member(reason=None)], False),  # the scheduler has not tried yet
        ("Inqueue", 0, [member(reason="SchedulingGated")], False),
    ],
)
def test_needs_preemption(phase, scheduled, members, want):
    assert needs_preemption(phase, 3, scheduled, members) is want


# ---- the re-check before acting on a record ------------------------------------------------------

NOW = 10_000.0


def victim_pod(uid: str = "u1", priority: int = 10, **meta) -> dict:
    return {
        "metadata": {"name": "low-1", "namespace": "ns", "uid": uid, **meta},
        "spec": {"priority": priority},
    }


@pytest.mark.parametrize(
    ("case", "kw", "pods", "why"),
    [
        ("acceptable", {}, {"ns/low-1": victim_pod()}, ""),
        ("victims gone already (resumed)", {}, {}, ""),
        ("no longer needed", {"needs_preemption": False}, {"ns/low-1": victim_pod()}, "no longer needs"),
        ("too old", {"now": NOW + 1000}, {"ns/low-1": victim_pod()}, "more than 300s"),
        ("from the future", {"now": NOW - 1000}, {"ns/low-1": victim_pod()}, "future"),
        ("another pod of the name", {}, {"ns/low-1": victim_pod(uid="other")}, "not the recorded pod"),
        ("equal priority", {}, {"ns/low-1": victim_pod(priority=100)}, "not lower"),
        ("higher priority", {}, {"ns/low-1": victim_pod(priority=2_000_000_000)}, "not lower"),
        (
            "DaemonSet pod",
            {},
            {"ns/low-1": victim_pod(ownerReferences=[{"kind": "DaemonSet"}])},
            "DaemonSet",
        ),
        (
            "mirror pod",
            {},
            {"ns/low-1": victim_pod(annotations={"kubernetes.io/config.mirror": "x"})},
            "mirror",
        ),
        (
            "opted out, hard",
            {},
            {"ns/low-1": victim_pod(labels={"priogate.io/allow-preemption": "false"})},
            "opted out",
        ),
        (
            "opted out, soft",
            {"opt_out_mode": "soft"},
            {"ns/low-1": victim_pod(labels={"priogate.io/allow-preemption": "false"})},
            "",
        ),
        (
            "opted out by YuniKorn's label, hard",
            {},
            {"ns/low-1": victim_pod(labels={"yunikorn.apache.org/allow-preemption": "False"})},
            "opted out (yunikorn.apache.org/allow-preemption=false)",
        ),
        (
            "opted out by YuniKorn's label, soft",
            {"opt_out_mode": "soft"},
            {"ns/low-1": victim_pod(labels={"yunikorn.apache.org/allow-preemption": "false"})},
            "",
        ),
        (
            "YuniKorn's label set to true",
            {},
            {"ns/low-1": victim_pod(labels={"yunikorn.apache.org/allow-preemption": "true"})},
            "",
        ),
    ],
)
def test_refusal(case, kw, pods, why):
    from priogate.preemption_record import refusal

    decision = RecordedDecision("r", NOW, (V1,), {}, "")
    args = {"needs_preemption": True, "preemptor_priority": 100, "pods": pods, "now": NOW + 5, **kw}
    got = refusal(decision, **args)
    assert why in got if why else got == "", (case, got)
