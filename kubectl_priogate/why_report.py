"""What `kubectl priogate why` reports of an object (kubectl_priogate/why.py builds it), and its
two renderings: kubectl describe's text and JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubectl_priogate.output import NONE, human_duration, shown, table
from priogate.preemption.outcome import iso


@dataclass(frozen=True)
class EventLine:
    type: str
    reason: str
    at: float | None  # epoch seconds of the last occurrence
    source: str
    note: str
    count: int


@dataclass(frozen=True)
class Report:
    kind: str
    namespace: str
    name: str
    state: str
    summary: str
    conditions: tuple[Mapping[str, Any], ...] = ()
    details: tuple[tuple[str, str], ...] = ()
    members: tuple[Mapping[str, str], ...] = ()
    events: tuple[EventLine, ...] = field(default=())


def condition_text(c: Mapping[str, Any]) -> str:
    text = f"{c.get('type')}={c.get('status')}"
    if c.get("reason"):
        text += f" ({c['reason']})"
    if c.get("message"):
        text += f": {c['message']}"
    return text


def render_text(report: Report, now: float) -> str:
    """kubectl describe's shape: labelled lines, then Conditions, Members and Events. Every
    value is shown escaped (output.shown): the report repeats tenant-written text, which must
    not forge a line (a second "State:") or clear the screen; the tables escape their cells."""
    out = [f"{report.kind}:".ljust(16) + shown(f"{report.namespace}/{report.name}")]
    out.append("State:".ljust(16) + shown(report.state))
    out.append("Why:".ljust(16) + shown(report.summary))
    out.extend(f"{label}:".ljust(16) + shown(text) for label, text in report.details)
    text = "\n".join(out) + "\n"
    if report.conditions:
        text += "Conditions:\n" + "".join(f"  {shown(condition_text(c))}\n" for c in report.conditions)
    if report.members:
        text += "Members:\n" + _indent(
            table(
                ["name", "phase", "node", "nominated", "scheduling"],
                [[m["name"], m["phase"], m["node"], m["nominated"], m["scheduling"]] for m in report.members],
            )
        )
    if report.events:
        rows = [
            [
                e.type,
                e.reason,
                NONE
                if e.at is None
                else human_duration(now - e.at) + (f" (x{e.count})" if e.count > 1 else ""),
                e.source or NONE,
                e.note,
            ]
            for e in report.events
        ]
        text += "Events:\n" + _indent(table(["type", "reason", "age", "from", "message"], rows))
    else:
        text += "Events:         <none>\n"
    return text


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())


def to_json(report: Report) -> dict[str, Any]:
    return {
        "kind": report.kind,
        "namespace": report.namespace,
        "name": report.name,
        "state": report.state,
        "why": report.summary,
        "conditions": [dict(c) for c in report.conditions],
        "details": [{"name": label, "value": text} for label, text in report.details],
        "members": [dict(m) for m in report.members],
        "events": [
            {
                "type": e.type,
                "reason": e.reason,
                "lastSeen": None if e.at is None else iso(e.at),
                "from": e.source,
                "count": e.count,
                "note": e.note,
            }
            for e in report.events
        ],
    }
