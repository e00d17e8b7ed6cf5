"""The PodGroup phase function, as a table (docs/controller.md has the same table)."""

from __future__ import annotations

import pytest

from priogate.phase import (
    EnqueueVerdict,
    Members,
    count_members,
    merge_conditions,
    next_phase,
    next_status,
    phase_event,
)
from tests.builders import pod

YES, NO = EnqueueVerdict(True), EnqueueVerdict(False, "quota compute insufficient")


def m(running=0, succeeded=0, failed=0, scheduled=None, active=None) -> Members:
    scheduled = running + succeeded + failed if scheduled is None else scheduled
    active = running if active is None else active
    return Members(running, succeeded, failed, scheduled, active)


@pytest.mark.parametrize(
    ("current", "min_member", "members", "enqueue", "want"),
    [
        # Pending -> Inqueue only when the enqueue policy admits
        ("", 3, m(), YES, "Inqueue"),
        ("", 3, m(), NO, "Pending"),
        ("Pending", 3, m(), YES, "Inqueue"),
        ("Pending", 3, m(), NO, "Pending"),
        ("Pending", 3, m(scheduled=2, active=3), NO, "Pending"),
        # minMember scheduled -> Running, from any unfinished phase
        ("Inqueue", 3, m(scheduled=2, active=3), YES, "Inqueue"),
        ("Inqueue", 3, m(scheduled=3, active=3), YES, "Running"),
        ("Inqueue", 3, m(running=3), NO, "Running"),
        ("Pending", 3, m(running=3), NO, "Running"),
        ("Unknown", 3, m(running=3), YES, "Running"),
        ("Running", 2, m(running=2, scheduled=2, active=5), YES, "Running"),
        # Inqueue -> Pending when resources went away and nothing is bound yet
        ("Inqueue", 3, m(active=3), NO, "Pending"),
        ("Inqueue", 3, m(scheduled=1, active=3), NO, "Inqueue"),
        # below minMember after running: Unknown while some member runs, else Pending
        ("Running", 3, m(running=1), YES, "Unknown"),
        ("Running", 3, m(running=0, scheduled=0, active=2), YES, "Pending"),
        ("Unknown", 3, m(running=0, scheduled=0, active=0), YES, "Pending"),
        ("Unknown", 3, m(running=2), YES, "Unknown"),
        # finished members count as scheduled: no flapping while a gang completes
        ("Running", 3, m(running=1, succeeded=2), YES, "Running"),
        # end states
        ("Running", 3, m(succeeded=3), YES, "Completed"),
        ("Running", 3, m(succeeded=2, failed=1, active=0), YES, "Failed"),
        ("Running", 2, m(succeeded=2, failed=1, active=0), YES, "Completed"),
        ("Completed", 3, m(), YES, "Completed"),  # members garbage-collected
        ("Failed", 3, m(), YES, "Failed"),
        ("Completed", 3, m(running=3), YES, "Running"),  # a retry runs members again
        # minMember 0 behaves as 1: a group without members is not Running
        ("", 0, m(), YES, "Inqueue"),
        ("Inqueue", 0, m(running=1), YES, "Running"),
    ],
)
def test_next_phase(current, min_member, members, enqueue, want):
    assert next_phase(current, min_member, members, enqueue) == want


def test_count_members():
    pods = [
        pod(phase="Pending"),
        pod(phase="Pending", node="n1"),
        pod(phase="Running", node="n1"),
        pod(phase="Running", node="n2", deleting=True),
        pod(phase="Succeeded", node="n1"),
        pod(phase="Failed", node="n2"),
    ]
    assert count_members(pods) == Members(running=1, succeeded=1, failed=1, scheduled=5, active=4)


def test_transition_time_changes_only_with_status():
    old = [
        {"type": "Scheduled", "status": "False", "reason": "A", "message": "1/3", "lastTransitionTime": "T0"},
        {"type": "Other", "status": "True", "lastTransitionTime": "T0"},
    ]
    new = [{"type": "Scheduled", "status": "False", "reason": "A", "message": "2/3"}]
    merged = merge_conditions(old, new, "T1")
    assert merged[0] == {**new[0], "lastTransitionTime": "T0"}
    assert merged[1] == old[1]  # someone else's condition is kept
    flipped = merge_conditions(old, [{**new[0], "status": "True"}], "T1")
    assert flipped[0]["lastTransitionTime"] == "T1"


def test_unchanged_input_gives_an_equal_status():
    """Idempotent: recomputing from the written status yields it again, so nothing is rewritten."""
    first = next_status({}, 3, m(running=3), YES, "T1")
    again = next_status(first, 3, m(running=3), YES, "T2")
    assert again == first
    assert first["phase"] == "Running" and first["running"] == 3


def test_pending_says_why():
    status = next_status({}, 3, m(), NO, "T1")
    unschedulable = next(c for c in status["conditions"] if c["type"] == "Unschedulable")
    assert unschedulable["status"] == "True"
    assert unschedulable["reason"] == "NotEnoughResources"
    assert unschedulable["message"] == NO.reason


def _status(phase: str, unschedulable: str = "") -> dict:
    conditions = [
        {"type": "Unschedulable", "status": "True" if unschedulable else "False", "message": unschedulable}
    ]
    return {"phase": phase, "conditions": conditions}


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        (None, _status("Inqueue"), ("Normal", "Inqueue", "phase none -> Inqueue")),
        (
            None,
            _status("Pending", "quota compute insufficient"),
            ("Normal", "Pending", "phase none -> Pending: quota compute insufficient"),
        ),
        (_status("Pending"), _status("Inqueue"), ("Normal", "Inqueue", "phase Pending -> Inqueue")),
        (_status("Inqueue"), _status("Running"), ("Normal", "Running", "phase Inqueue -> Running")),
        (
            _status("Inqueue"),
            _status("Pending", "cluster capacity insufficient"),
            ("Warning", "Pending", "phase Inqueue -> Pending: cluster capacity insufficient"),
        ),
        (
            _status("Running"),
            _status("Unknown", "1/3 members scheduled, 1 running"),
            ("Warning", "Unknown", "phase Running -> Unknown: 1/3 members scheduled, 1 running"),
        ),
        (_status("Running"), _status("Completed"), ("Normal", "Completed", "phase Running -> Completed")),
        (_status("Running"), _status("Failed"), ("Warning", "Failed", "phase Running -> Failed")),
        (_status("Running"), _status("Running"), None),  # counts or conditions changed: no event
    ],
)
def test_phase_event(old, new, want):
    event = phase_event(old, new)
    assert (None if event is None else (event.type, event.reason, event.note)) == want


def test_a_verdict_with_control_characters_is_escaped_in_the_condition_and_the_event():
    """The verdict's text can carry a tenant's resource name: what is written and what the
    Event says show its control characters as escapes, and recomputing changes nothing."""
    forged = EnqueueVerdict(False, "minResources cpu\n\x1b[2J State: Running\u202e=1 exceed")
    status = next_status({}, 1, m(), forged, "T1")
    unschedulable = next(c for c in status["conditions"] if c["type"] == "Unschedulable")
    assert unschedulable["message"] == "minResources cpu\\n\\x1b[2J State: Running\\u202e=1 exceed"
    assert next_status(status, 1, m(), forged, "T2") == status
    event = phase_event(None, status)
    assert event is not None
    assert event.note == "phase none -> Pending: " + unschedulable["message"]
