"""Gang preemption decisions recorded on the preemptor, and what to do next. Pure.

The decision is written to the PodGroup (annotation priogate.io/preemption) *before* any
victim is touched. A controller that restarts, or a new leader, finds the record and finishes
that same decision instead of computing a second round of victims from a half-changed cluster.
A new decision is taken only after the recorded one was applied, its victims are gone, and the
scheduler had `retry_after` seconds to use the room: the same guard as kube-scheduler's
PodEligibleToPreemptOthers (pkg/scheduler/framework/plugins/defaultpreemption), which lets a
pod preempt again only once the pods preempted on its nominated node have terminated.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from priogate.podgroup import Phase

ANNOTATION = "priogate.io/preemption"
# The pod condition a preemption victim gets (KEP-3329), and the reasons that name who preempted.
DISRUPTION_TARGET = "DisruptionTarget"
CONDITION_REASON = "PreemptionByPriogate"
SCHEDULER_REASON = "PreemptionByScheduler"
DEFAULT_RETRY_AFTER = 30.0


@dataclass(frozen=True)
class Victim:
    namespace: str
    name: str
    uid: str
    node: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class RecordedDecision:
    """A gang preemption decision as the PodGroup's annotation records it."""

    id: str
    decided_at: float  # epoch seconds
    victims: tuple[Victim, ...]
    placements: Mapping[str, str]  # member pod name -> nominated node
    reason: str
    applied: bool = False

    def to_annotation(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "decidedAt": self.decided_at,
                "victims": [
                    {"namespace": v.namespace, "name": v.name, "uid": v.uid, "node": v.node}
                    for v in self.victims
                ],
                "nominated": dict(sorted(self.placements.items())),
                "reason": self.reason,
                "applied": self.applied,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_annotation(cls, text: str) -> RecordedDecision:
        """Raises ValueError for a record that is not ours to read."""
        try:
            raw = json.loads(text)
            return cls(
                id=str(raw["id"]),
                decided_at=float(raw["decidedAt"]),
                victims=tuple(
                    Victim(str(v["namespace"]), str(v["name"]), str(v["uid"]), str(v.get("node", "")))
                    for v in raw["victims"]
                ),
                placements={str(k): str(v) for k, v in (raw.get("nominated") or {}).items()},
                reason=str(raw.get("reason", "")),
                applied=bool(raw.get("applied", False)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"annotation {ANNOTATION} is not a preemption record: {e}") from None

    def done(self) -> RecordedDecision:
        return RecordedDecision(self.id, self.decided_at, self.victims, self.placements, self.reason, True)


def recorded(podgroup: Mapping[str, Any]) -> RecordedDecision | None:
    text = ((podgroup.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not text:
        return None
    return RecordedDecision.from_annotation(text)


class Step(Enum):
    IDLE = "idle"  # nothing to do
    DECIDE = "decide"  # ask the engine for a new decision
    RESUME = "resume"  # a recorded decision was not finished: finish it
    WAIT = "wait"  # the last decision's victims are still leaving, or the scheduler is busy


def next_step(
    decision: RecordedDecision | None,
    needs_preemption: bool,
    present_victims: Collection[str],
    now: float,
    retry_after: float = DEFAULT_RETRY_AFTER,
) -> Step:
    """`present_victims`: uids of the recorded victims that still exist."""
    if decision is not None and not decision.applied:
        return Step.RESUME
    if not needs_preemption:
        return Step.IDLE
    if decision is None:
        return Step.DECIDE
    if any(v.uid in present_victims for v in decision.victims):
        return Step.WAIT
    if now - decision.decided_at < retry_after:
        return Step.WAIT
    return Step.DECIDE


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """The scheduler tried the pod and found no node (PodScheduled=False, reason Unschedulable)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return False


def needs_preemption(
    phase: str, min_member: int, scheduled: int, members: Iterable[Mapping[str, Any]]
) -> bool:
    """A gang worth preempting for: admitted (Inqueue, or Unknown after losing members), below
    minMember, and with a pending member the scheduler has already failed to place. Pending
    groups wait for the enqueue step, as in Volcano; kube-scheduler handles single pods."""
    if phase not in (Phase.INQUEUE, Phase.UNKNOWN) or scheduled >= max(min_member, 1):
        return False
    return any(
        not (m.get("spec") or {}).get("nodeName")
        and not (m.get("metadata") or {}).get("deletionTimestamp")
        and unschedulable(m)
        for m in members
    )


def disruption_condition(now: str, preemptor: str) -> dict[str, str]:
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": CONDITION_REASON,
        "message": f"priogate: preempted to make room for PodGroup {preemptor}",
        "lastTransitionTime": now,
    }
