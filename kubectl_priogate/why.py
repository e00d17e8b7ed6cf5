"""`kubectl priogate why`: why a pod is pending or was preempted, why a PodGroup is pending.
Pure: the object, its Events and priogate's preemption records in; a report out.

What is read, and who writes it:
- a pod's PodScheduled condition (kube-scheduler: reason Unschedulable and the "0/N nodes are
  available" message), its DisruptionTarget condition (KEP-3329; reason PreemptionByPriogate
  from the controller, PreemptionByScheduler from kube-scheduler), status.nominatedNodeName;
- a PodGroup's Scheduled and Unschedulable conditions (the controller, priogate.phase);
- the preemption record annotation on PodGroups (priogate.preemption_record), which names the
  victims: the one trace left of a victim once it is deleted, beside its Events;
- events.k8s.io/v1 Events regarding the object (kube-scheduler's FailedScheduling and
  Preempted, the controller's Preempted and phase changes).
A refusal at admission leaves no object and no Event: kubectl printed it when it was made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubectl_priogate.output import NONE
from kubectl_priogate.why_report import EventLine, Report, condition_text
from priogate import gate
from priogate.clock import epoch_seconds
from priogate.ledger.model import Entry
from priogate.phase import SCHEDULED, UNSCHEDULABLE
from priogate.podgroup import Phase, PodPhase, group_of
from priogate.preemption.outcome import iso
from priogate.preemption_record import (
    CONDITION_REASON,
    DISRUPTION_TARGET,
    SCHEDULER_REASON,
    RecordedDecision,
    recorded,
)

POD_KINDS = ("pod", "pods", "po")
PODGROUP_KINDS = ("podgroup", "podgroups", "pg", "podgroups.scheduling.volcano.sh")
EVENT_LIMIT = 15  # the newest ones; `kubectl get events` has them all
POD_SCHEDULED = "PodScheduled"


def parse_target(target: str) -> tuple[str, str]:
    """ "NAME", "pod/NAME" or "podgroup/NAME" -> ("Pod" | "PodGroup", name); ValueError else."""
    kind, sep, name = target.partition("/")
    if not sep:
        kind, name = "pod", target
    if not name or "/" in name:
        raise ValueError(f'invalid resource name "{target}": use POD, pod/NAME or podgroup/NAME')
    if kind.lower() in POD_KINDS:
        return "Pod", name
    if kind.lower() in PODGROUP_KINDS:
        return "PodGroup", name
    raise ValueError(f'the plugin explains pods and podgroups, not "{kind}"')


# ---- reading the pieces ------------------------------------------------------------------------


def condition(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == type_:
            return c
    return None


def _reason_message(c: Mapping[str, Any], *, lower: bool = False) -> str:
    """ "Reason: message" of a condition; the reason lower-cased to open a sentence."""
    reason = str(c.get("reason") or "")
    text = reason.lower() if lower else reason
    message = str(c.get("message") or "")
    return f"{text}: {message}" if text and message else text or message


def _time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return epoch_seconds(value)
    except ValueError:
        return None


def event_lines(events: Iterable[Mapping[str, Any]], uid: str | None = None) -> tuple[EventLine, ...]:
    """The newest EVENT_LIMIT events, oldest first. With `uid`, events about another object of
    the same name (an earlier pod) are left out; events that name no uid are kept."""
    lines = []
    for e in events:
        regarding = e.get("regarding") or {}
        if uid and regarding.get("uid") and regarding.get("uid") != uid:
            continue
        at = (
            _time((e.get("series") or {}).get("lastObservedTime"))
            or _time(e.get("eventTime"))
            or _time(e.get("deprecatedLastTimestamp"))
            or _time((e.get("metadata") or {}).get("creationTimestamp"))
        )
        source = e.get("reportingController") or (e.get("deprecatedSource") or {}).get("component") or ""
        count = int((e.get("series") or {}).get("count") or e.get("deprecatedCount") or 1)
        lines.append(
            EventLine(
                str(e.get("type") or ""),
                str(e.get("reason") or ""),
                at,
                str(source),
                str(e.get("note") or ""),
                count,
            )
        )
    lines.sort(key=lambda line: line.at if line.at is not None else float("-inf"))
    return tuple(lines[-EVENT_LIMIT:])


def records_naming(
    podgroups: Iterable[Mapping[str, Any]], namespace: str, name: str, uid: str | None
) -> list[tuple[str, RecordedDecision]]:
    """(PodGroup key, decision) of every readable preemption record naming the pod as a victim,
    oldest first. With the pod's `uid`, a record about an earlier pod of its name does not count."""
    found = []
    for group in podgroups:
        try:
            decision = recorded(group)
        except ValueError:
            continue  # not ours to read; `why podgroup/NAME` on that group says so
        if decision is None:
            continue
        for victim in decision.victims:
            if (victim.namespace, victim.name) == (namespace, name) and not (
                uid and victim.uid and victim.uid != uid
            ):
                meta = group.get("metadata") or {}
                found.append((f"{meta.get('namespace')}/{meta.get('name')}", decision))
                break
    return sorted(found, key=lambda item: item[1].decided_at)


def _decision_state(decision: RecordedDecision) -> str:
    if decision.stopped:
        return f"stopped: {decision.stopped}"
    return "applied" if decision.applied else "recorded, being applied"


def _record_text(group_key: str, decision: RecordedDecision) -> str:
    return (
        f"PodGroup {group_key}, decision {decision.id} at {iso(decision.decided_at)} "
        f"({_decision_state(decision)}): {decision.reason}"
    )


# ---- pods --------------------------------------------------------------------------------------


def pod_report(
    namespace: str,
    name: str,
    pod: Mapping[str, Any] | None,
    events: Iterable[Mapping[str, Any]],
    records: Sequence[tuple[str, RecordedDecision]],
    group: Mapping[str, Any] | None = None,
) -> Report | None:
    """None when the pod does not exist and nothing remembers it (the caller's NotFound)."""
    uid = ((pod or {}).get("metadata") or {}).get("uid")
    lines = event_lines(events, uid)
    if pod is None and not lines and not records:
        return None
    meta = (pod or {}).get("metadata") or {}
    spec = (pod or {}).get("spec") or {}
    status = (pod or {}).get("status") or {}
    scheduled = condition(pod, POD_SCHEDULED)
    disruption = condition(pod, DISRUPTION_TARGET)
    conditions = tuple(c for c in (scheduled, disruption) if c is not None)
    details: list[tuple[str, str]] = []
    if pod is not None:
        details.append(("Phase", str(status.get("phase") or PodPhase.PENDING)))
        details.append(("Node", str(spec.get("nodeName") or NONE)))
        if status.get("nominatedNodeName"):
            details.append(("Nominated node", str(status["nominatedNodeName"])))
        details.append(
            ("Priority", f"{spec.get('priority', 0)} ({spec.get('priorityClassName') or 'no class'})")
        )
    for key, decision in records:
        details.append(("Preempted for", _record_text(key, decision)))
    group_name = group_of(pod) if pod is not None else ""
    if group_name:
        details.append(("PodGroup", _group_line(namespace, group_name, group)))

    preempted_condition = (
        disruption is not None
        and disruption.get("status") == "True"
        and disruption.get("reason") in (CONDITION_REASON, SCHEDULER_REASON)
    )
    preempted_events = [line for line in lines if line.reason == "Preempted"]
    terminating = bool(meta.get("deletionTimestamp"))
    if records or preempted_condition or preempted_events:
        state = "Preempted"
        if records:
            key, decision = records[-1]
            summary = (
                f"preempted by priogate to make room for PodGroup {key} "
                f"(decision {decision.id}, {_decision_state(decision)})"
            )
        elif preempted_condition:
            assert disruption is not None
            who = "priogate" if disruption.get("reason") == CONDITION_REASON else "kube-scheduler"
            summary = f"preempted by {who}: {disruption.get('message') or disruption.get('reason')}"
        else:
            last = preempted_events[-1]
            who = "kube-scheduler" if last.source == "default-scheduler" else last.source or "unknown"
            summary = f"preempted by {who}: {last.note}"
        if pod is None:
            summary += "; the pod is gone"
        elif terminating:
            summary += "; terminating"
    elif pod is None:
        state, summary = "Gone", "the pod no longer exists; its Events below say what happened to it"
    elif terminating:
        state = "Terminating"
        summary = "being deleted" + (f": {condition_text(disruption)}" if disruption else "")
    elif status.get("phase") in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        state = str(status["phase"])
        summary = "finished" + (f": {status.get('reason')}" if status.get("reason") else "")
        if status.get("message"):
            summary += f": {status['message']}"
    elif spec.get("schedulingGates"):
        state = PodPhase.PENDING
        gates = ", ".join(str(g.get("name")) for g in spec["schedulingGates"] if isinstance(g, Mapping))
        summary = f"not considered by the scheduler yet: scheduling gates {gates}"
        if gate.has_gate(pod or {}):
            summary += "; " + _gate_text(namespace, group_name, group)
    elif not spec.get("nodeName"):
        state = PodPhase.PENDING
        if scheduled is not None and scheduled.get("status") == "False":
            summary = _reason_message(scheduled, lower=True)
        else:
            summary = "not tried by the scheduler yet"
        if status.get("nominatedNodeName"):
            summary += (
                f"; nominated to node {status['nominatedNodeName']}: room is being made there "
                "(victims are leaving)"
            )
        if group_name and group is not None:
            group_phase = (group.get("status") or {}).get("phase") or Phase.PENDING
            if group_phase == Phase.PENDING:
                summary += f"; its PodGroup {group_name} is Pending (not admitted to its queue)"
    else:
        state = str(status.get("phase") or PodPhase.PENDING)
        running = state == PodPhase.RUNNING
        summary = f"scheduled to node {spec['nodeName']}" + (
            "; nothing holds it back" if running else "; waiting for its node to start it"
        )
    # str(): a PodPhase member is a StrEnum, which YAML output cannot represent.
    return Report("Pod", namespace, name, str(state), summary, conditions, tuple(details), (), lines)


def _gate_text(namespace: str, name: str, group: Mapping[str, Any] | None) -> str:
    """What priogate's gate (priogate.gate) holds the pod for."""
    if group is None:
        return (
            f"{gate.GATE} holds it until its PodGroup {namespace}/{name} exists and is Inqueue "
            "(the controller lifts the gate if no such group appears)"
        )
    phase = (group.get("status") or {}).get("phase") or Phase.PENDING
    text = f"{gate.GATE} holds it until its PodGroup {namespace}/{name} is Inqueue (now {phase}"
    unschedulable = condition(group, UNSCHEDULABLE)
    if unschedulable is not None and unschedulable.get("status") == "True":
        text += f": {_reason_message(unschedulable)}"
    return text + ")"


def _group_line(namespace: str, name: str, group: Mapping[str, Any] | None) -> str:
    if group is None:
        return f"{namespace}/{name} (not found)"
    phase = (group.get("status") or {}).get("phase") or Phase.PENDING
    text = f"{namespace}/{name}, phase {phase}"
    unschedulable = condition(group, UNSCHEDULABLE)
    if unschedulable is not None and unschedulable.get("status") == "True":
        text += f": {_reason_message(unschedulable)}"
    return text


# ---- PodGroups ---------------------------------------------------------------------------------


def podgroup_report(
    group: Mapping[str, Any],
    members: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    ledger: Mapping[str, Entry] | None,
    *,
    ledger_error: str = "",
) -> Report:
    """`ledger`: the namespace's entries by uid (None: the namespace has no ledger, or
    `ledger_error` says why it could not be read)."""
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    status = group.get("status") or {}
    namespace, name, uid = str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid", ""))
    phase = str(status.get("phase") or "")
    min_member = int(spec.get("minMember") or 1)
    scheduled = condition(group, SCHEDULED)
    unschedulable = condition(group, UNSCHEDULABLE)
    conditions = tuple(c for c in (scheduled, unschedulable) if c is not None)
    members = sorted(members, key=lambda p: str((p.get("metadata") or {}).get("name")))
    rows = tuple(_member_row(p) for p in members)
    bound = sum(1 for r in rows if r["node"] != NONE)
    details: list[tuple[str, str]] = [
        ("Phase", phase or NONE),
        ("Min member", f"{min_member} ({bound} of {len(rows)} member pods bound)"),
        ("Priority class", str(spec.get("priorityClassName") or NONE)),
        ("Reservation", ledger_error or _reservation_text(ledger, uid)),
    ]
    try:
        decision = recorded(group)
    except ValueError as e:
        decision = None
        details.append(("Preemption", f"unreadable record: {e}"))
    if decision is not None:
        details.append(
            (
                "Preemption",
                f"decision {decision.id} at {iso(decision.decided_at)} "
                f"({_decision_state(decision)}): {decision.reason}",
            )
        )
        details.append(
            ("Victims", ", ".join(f"{v.key} on {v.node or '?'}" for v in decision.victims) or NONE)
        )
        if decision.placements:
            details.append(
                ("Nominated", ", ".join(f"{m} to {n}" for m, n in sorted(decision.placements.items())))
            )

    unschedulable_true = unschedulable is not None and unschedulable.get("status") == "True"
    why = _reason_message(unschedulable) if unschedulable_true and unschedulable else ""
    stuck = [r for r in rows if r["node"] == NONE and r["scheduling"] != NONE]
    if not phase:
        summary = "not reconciled by the controller yet (no phase)"
    elif phase == Phase.PENDING:
        summary = (
            f"not admitted to its queue: {why}"
            if why
            else "waiting for the controller to admit it to its queue"
        )
    elif phase == Phase.INQUEUE:
        summary = f"admitted (Inqueue), {bound}/{min_member} members bound"
        if stuck:
            summary += f"; {len(stuck)} member(s) unschedulable: {stuck[0]['scheduling']}"
        if decision is not None and not decision.stopped:
            victims = len(decision.victims)
            summary += f"; gang preemption {decision.id} {_decision_state(decision)} ({victims} victim(s))"
        elif decision is not None:
            summary += f"; last gang preemption {decision.id} {_decision_state(decision)}"
    elif phase == Phase.UNKNOWN:
        summary = f"gang broken: {why}" if why else "gang broken: fewer than minMember members scheduled"
    elif phase == Phase.RUNNING:
        summary = f"running: {(scheduled or {}).get('message') or f'{bound}/{min_member} members scheduled'}"
    else:
        summary = f"finished ({phase})"
    return Report(
        "PodGroup",
        namespace,
        name,
        phase or NONE,
        summary,
        conditions,
        tuple(details),
        rows,
        event_lines(events, uid),
    )


def _reservation_text(ledger: Mapping[str, Entry] | None, uid: str) -> str:
    if ledger is None:
        return "no ledger in the namespace"
    entry = ledger.get(uid)
    if entry is None:
        return "holds none (no ledger entry)"
    amounts = ", ".join(f"{k}={v}" for k, v in sorted(entry.min_resources.items()))
    return (
        f"holds minResources {amounts or 'none'}, minMember {entry.min_member} (admitted {entry.admitted_at})"
    )


def _member_row(pod: Mapping[str, Any]) -> dict[str, str]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    scheduled = condition(pod, POD_SCHEDULED)
    scheduling = NONE
    if scheduled is not None and scheduled.get("status") == "False":
        scheduling = _reason_message(scheduled)
    return {
        "name": str(meta.get("name")),
        "phase": str(status.get("phase") or PodPhase.PENDING)
        + (" (terminating)" if meta.get("deletionTimestamp") else ""),
        "node": str(spec.get("nodeName") or NONE),
        "nominated": str(status.get("nominatedNodeName") or NONE),
        "scheduling": scheduling,
    }
