"""The PodGroup phase function: a group, its member pods and the enqueue verdict in, the new
status out. Pure; docs/controller.md has the table.

The rules follow the kube-batch "Delay Pod Creation" table (Pending -> Inqueue when resources
are there, Inqueue -> Pending when they are not any more, Inqueue -> Running when minMember
members run) and Volcano's session-close function (a member counts as scheduled once bound,
including finished members and terminating ones still on their node, so the phase does not
flap while victims leave), plus the end states: Completed, and Failed when every member
finished and fewer than minMember succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from priogate.podgroup import FINISHED_PHASES, Phase, PodPhase
from priogate.text import escape_untrusted

SCHEDULED = "Scheduled"
UNSCHEDULABLE = "Unschedulable"
# True while the namespace's summed reservations exceed a quota lowered since they were admitted
# (priogate.quota.over_reserved); written only once it has been True.
QUOTA_BELOW_RESERVATIONS = "QuotaBelowReservations"
# Reasons of the Unschedulable condition while a group is Pending (the rollback reasons).
NOT_ENOUGH_RESOURCES = "NotEnoughResources"  # quota or capacity do not allow it (any more)
INQUEUE_TIMEOUT = "InqueueTimeout"  # Inqueue too long, members unschedulable, no preemption possible


@dataclass(frozen=True)
class Members:
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    scheduled: int = 0  # bound to a node, or finished
    active: int = 0  # neither Succeeded nor Failed (pending, bound, running, terminating)


@dataclass(frozen=True)
class EnqueueVerdict:
    """The enqueue policy's verdict (priogate/enqueue.py): may the group hold resources now?"""

    admitted: bool
    reason: str = ""
    # The Unschedulable condition's reason when the group is (or goes back to) Pending.
    condition_reason: str = NOT_ENOUGH_RESOURCES


def count_members(pods: Iterable[Mapping[str, Any]]) -> Members:
    running = succeeded = failed = scheduled = active = 0
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase") or PodPhase.PENDING
        if phase == PodPhase.SUCCEEDED:
            succeeded += 1
            scheduled += 1
            continue
        if phase == PodPhase.FAILED:
            failed += 1
            scheduled += 1
            continue
        active += 1
        if (pod.get("spec") or {}).get("nodeName"):
            scheduled += 1
            if phase == PodPhase.RUNNING and not (pod.get("metadata") or {}).get("deletionTimestamp"):
                running += 1
    return Members(running, succeeded, failed, scheduled, active)


def next_phase(current: str, min_member: int, members: Members, enqueue: EnqueueVerdict) -> str:
    need = max(min_member, 1)
    current = current or Phase.PENDING
    if members.active == 0 and members.succeeded + members.failed >= need:
        return Phase.COMPLETED if members.succeeded >= min_member else Phase.FAILED
    if current in FINISHED_PHASES and members.active == 0:
        return current  # members gone (pod garbage collection): the group stays finished
    if members.scheduled >= need:
        return Phase.RUNNING
    if current in (Phase.RUNNING, Phase.UNKNOWN):
        # Below minMember: with members still running the gang is broken but alive (Volcano's
        # Unknown; its owner decides); with none running it starts over from Pending.
        return Phase.UNKNOWN if members.running > 0 else Phase.PENDING
    if current == Phase.INQUEUE:
        # Members already bound are on their way; otherwise roll back when resources went away
        # (Delay Pod Creation's InQueue -> Pending), so a group does not hold a reservation it
        # cannot use.
        return Phase.INQUEUE if members.scheduled > 0 or enqueue.admitted else Phase.PENDING
    return Phase.INQUEUE if enqueue.admitted else Phase.PENDING


def _condition(type_: str, status: bool, reason: str, message: str) -> dict[str, str]:
    """Every condition the controller writes on a PodGroup is made here, so its message is
    escaped here: it can carry tenant text (a minResources name in a quota or capacity verdict),
    and `kubectl describe` and `kubectl priogate why` print it. Idempotent, so a status
    recomputed from the written one is equal to it and not written again."""
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": escape_untrusted(message),
    }


def desired_conditions(
    phase: str, min_member: int, members: Members, enqueue: EnqueueVerdict
) -> list[dict[str, str]]:
    scheduled = members.scheduled >= max(min_member, 1)
    counts = f"{members.scheduled}/{min_member} members scheduled"
    conditions = [
        _condition(
            SCHEDULED, scheduled, "MinMemberScheduled" if scheduled else "NotEnoughMembersScheduled", counts
        )
    ]
    if phase == Phase.PENDING and not enqueue.admitted:
        conditions.append(_condition(UNSCHEDULABLE, True, enqueue.condition_reason, enqueue.reason))
    elif phase == Phase.UNKNOWN:
        conditions.append(
            _condition(UNSCHEDULABLE, True, "GangBroken", f"{counts}, {members.running} running")
        )
    else:
        conditions.append(_condition(UNSCHEDULABLE, False, "Schedulable", ""))
    return conditions


def merge_conditions(
    old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, str]], now: str
) -> list[dict[str, Any]]:
    """New conditions with lastTransitionTime kept unless a condition's status changed.
    Conditions of other types (written by someone else) are kept as they are."""
    by_type = {c.get("type"): c for c in old if isinstance(c, Mapping)}
    merged: list[dict[str, Any]] = []
    for condition in new:
        previous = by_type.pop(condition["type"], None)
        changed = previous is None or previous.get("status") != condition["status"]
        stamp = now if changed else previous.get("lastTransitionTime") or now
        merged.append({**condition, "lastTransitionTime": stamp})
    merged.extend(dict(c) for c in by_type.values())
    return merged


def next_status(
    status: Mapping[str, Any] | None,
    min_member: int,
    members: Members,
    enqueue: EnqueueVerdict,
    now: str,
    over_quota: str | None = None,
) -> dict[str, Any]:
    """The whole new status. Equal to `status` (==) when nothing changed, so the caller writes
    only on a real change. `over_quota`: why the namespace's reservations exceed a quota."""
    status = dict(status or {})
    phase = next_phase(status.get("phase") or "", min_member, members, enqueue)
    desired = desired_conditions(phase, min_member, members, enqueue)
    old = status.get("conditions") or []
    had = any(isinstance(c, Mapping) and c.get("type") == QUOTA_BELOW_RESERVATIONS for c in old)
    if over_quota is not None:
        desired.append(_condition(QUOTA_BELOW_RESERVATIONS, True, "QuotaLowered", over_quota))
    elif had:
        desired.append(_condition(QUOTA_BELOW_RESERVATIONS, False, "WithinQuota", ""))
    conditions = merge_conditions(old, desired, now)
    return {
        **status,
        "phase": phase,
        "conditions": conditions,
        "running": members.running,
        "succeeded": members.succeeded,
        "failed": members.failed,
    }


@dataclass(frozen=True)
class PhaseEvent:
    type: str  # Normal or Warning
    reason: str
    note: str


# Moves that mean a gang lost ground: an admin wants them among the Warnings.
_SETBACKS = {
    (Phase.INQUEUE, Phase.PENDING),
    (Phase.RUNNING, Phase.PENDING),
    (Phase.RUNNING, Phase.UNKNOWN),
    (Phase.UNKNOWN, Phase.PENDING),
}


def quota_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> PhaseEvent | None:
    """A Warning when the QuotaBelowReservations condition turns True, else None."""

    def below(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return next(
            (
                c
                for c in (status or {}).get("conditions") or []
                if c.get("type") == QUOTA_BELOW_RESERVATIONS and c.get("status") == "True"
            ),
            None,
        )

    now = below(new)
    if now is None or below(old) is not None:
        return None
    return PhaseEvent("Warning", QUOTA_BELOW_RESERVATIONS, now.get("message") or "")


def phase_event(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> PhaseEvent | None:
    """The Event to record on the PodGroup for a status write, or None when the phase stayed.
    The note carries the Unschedulable condition's message when there is one, so
    `kubectl describe podgroup` says why without reading the status."""
    before, after = (old or {}).get("phase") or "", new.get("phase") or ""
    if before == after:
        return None
    why = next(
        (
            c.get("message")
            for c in new.get("conditions") or []
            if c.get("type") == UNSCHEDULABLE and c.get("status") == "True" and c.get("message")
        ),
        "",
    )
    note = f"phase {before or 'none'} -> {after}" + (f": {why}" if why else "")
    warning = (before, after) in _SETBACKS or after == Phase.FAILED
    return PhaseEvent("Warning" if warning else "Normal", after, note)
