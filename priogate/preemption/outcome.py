"""What the engine decided for one preemptor, and the human-readable texts around it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from priogate.clock import from_epoch, rfc3339
from priogate.preemption.records import PodInfo
from priogate.preemption.victims import CRITERIA, NodeVictims

Status = Literal["preempt", "unresolved", "fits"]
# How an unresolved reason begins when --pdb-mode strict alone keeps the preemptor pending:
# `simulate` says so.
PDB_STRICT_REASON = "cannot preempt without violating a PodDisruptionBudget (--pdb-mode strict)"


@dataclass(frozen=True)
class Outcome:
    preemptor: str  # "ns/name", or "podgroup:ns/name"
    status: Status
    reason: str
    node: str | None = None  # the nominated node of a single pod
    placements: Mapping[str, str] = field(default_factory=dict)
    victims: tuple[PodInfo, ...] = ()
    nodes: Mapping[str, str] | None = None  # --explain: node -> why it lost
    clear_below: int | None = None  # lower-priority nominations to the placement nodes are dropped
    # Why no decision could be trusted: a constraint the engine does not model (gang_fit.py);
    # the controller tells the PodGroup in a Warning Event.
    refused: str = ""


def fits(preemptor: str) -> Outcome:
    return Outcome(preemptor, "fits", "fits without preemption")


def unresolved(
    preemptor: str, reason: str, nodes: Mapping[str, str] | None = None, *, refused: str = ""
) -> Outcome:
    return Outcome(preemptor, "unresolved", reason, nodes=nodes, refused=refused)


def with_note(reason: str, *notes: str) -> str:
    extra = "; ".join(n for n in notes if n)
    return f"{reason}; {extra}" if extra else reason


def iso(ts: float) -> str:
    if math.isinf(ts):
        return "not started"
    return rfc3339(from_epoch(ts))


def summarize_failures(failures: Mapping[str, str], total: int) -> str:
    """kube-scheduler's shape: "0/5 nodes are available: 3 Insufficient cpu, 2 ..."."""
    counts = Counter(failures.values())
    parts = [f"{n} {why}" for why, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    listed = ", ".join(parts) if parts else "no nodes in the snapshot"
    return f"0/{total} nodes are available: {listed}"


def _metric(result: NodeVictims, criterion: int) -> str:
    victims = result.victims
    if criterion == 0:
        return str(result.opted_out)
    if criterion == 1:
        return str(result.owners)
    if criterion == 2:
        return str(result.pdb_violations)
    if criterion == 3:
        return str(victims[0].priority) if victims else "none"
    if criterion == 4:
        return str(sum(v.priority for v in victims))
    if criterion == 5:
        return str(len(victims))
    if criterion == 6:
        if not victims:
            return "none"
        top = victims[0].priority
        return iso(min(v.start_time for v in victims if v.priority == top))
    return result.node


def lost_because(result: NodeVictims, best: NodeVictims) -> str:
    """Why a candidate node lost: the first criterion of the node order where it is worse."""
    mine, theirs = result.key, best.key
    criterion = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b)
    return (
        f"lost to {best.node} on {CRITERIA[criterion]} "
        f"({_metric(result, criterion)} vs {_metric(best, criterion)}); "
        f"would preempt {len(result.victims)} pod(s)"
    )


def describe_victims(result: NodeVictims) -> str:
    victims = result.victims
    if not victims:
        return "no new victims: lower-priority pods already terminating there make room"
    text = f"{len(victims)} victim(s), highest priority {victims[0].priority}"
    if result.pdb_violations:
        text += f", {result.pdb_violations} PDB violation(s)"
    if result.owners:
        text += f", {result.owners} owner/driver pod(s) (victim classes: regular pods do not suffice)"
    if result.opted_out:
        text += f", {result.opted_out} opted out of preemption (soft mode: nothing else works)"
    return text
