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
# A record older than this is not acted on: a decision is applied within seconds of being
# taken, and resumed by the next leader within a lease duration or two.
DEFAULT_MAX_AGE = 300.0
# How far in the future a record's time may be (clock skew between replicas) before it is
# treated as forged: otherwise a future time would dodge the age bound.
CLOCK_SKEW = 30.0
# What makes a pod never a victim, for the engine (priogate/preemption/parse.py) and the
# re-check below alike.
OPT_OUT_LABEL = "priogate.io/allow-preemption"
# The YuniKorn simple preemptor's own name for the same opt-out (its design's "Preemption Opt
# out (OP)" class: "a label such as yunikorn.apache.org/allow-preemption: false"), honoured as
# an alias so pods labelled for YuniKorn keep their protection under priogate.
YUNIKORN_OPT_OUT_LABEL = "yunikorn.apache.org/allow-preemption"
OPT_OUT_LABELS = (OPT_OUT_LABEL, YUNIKORN_OPT_OUT_LABEL)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


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
    stopped: str = ""  # why the controller refused to finish it (then applied is True too)

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
                **({"stopped": self.stopped} if self.stopped else {}),
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
                stopped=str(raw.get("stopped") or ""),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"annotation {ANNOTATION} is not a preemption record: {e}") from None

    def done(self) -> RecordedDecision:
        return RecordedDecision(self.id, self.decided_at, self.victims, self.placements, self.reason, True)

    def stop(self, why: str) -> RecordedDecision:
        """Closed without being finished: never resumed, and no victim of it waited for."""
        return RecordedDecision(
            self.id, self.decided_at, self.victims, self.placements, self.reason, True, why or "stopped"
        )


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
    if decision is None or decision.stopped:
        return Step.DECIDE  # a refused record took nothing: neither its victims nor its time count
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


def disruption_condition(now: str, preemptor: str, kind: str = "PodGroup") -> dict[str, str]:
    """The DisruptionTarget condition priogate puts on a victim before deleting it (KEP-3329;
    kube-scheduler's is reason PreemptionByScheduler, pkg/scheduler/framework/preemption/
    executor.go). `kind`: what preempts, "PodGroup" or "Pod"."""
    return {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": CONDITION_REASON,
        "message": f"priogate: preempted to make room for {kind} {preemptor}",
        "lastTransitionTime": now,
    }


def _priority(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def opt_out_label(labels: Mapping[str, Any] | None) -> str:
    """The opt-out label (priogate's or YuniKorn's alias) set to "false" on a pod with
    these labels, or "" when the pod has not opted out of preemption."""
    for name in OPT_OUT_LABELS:
        if str((labels or {}).get(name, "")).lower() == "false":
            return name
    return ""


def protected(pod: Mapping[str, Any], opt_out_mode: str) -> str:
    """Why a pod may never be a victim, or "": the engine's rules (DaemonSet and mirror pods;
    the opt-out label in hard mode), read again from the pod itself."""
    meta = pod.get("metadata") or {}
    if any(
        isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []
    ):
        return "a DaemonSet pod"
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "a mirror pod"
    label = opt_out_label(meta.get("labels"))
    if opt_out_mode == "hard" and label:
        return f"opted out ({label}=false)"
    return ""


def refusal(
    decision: RecordedDecision,
    *,
    needs_preemption: bool,
    preemptor_priority: int,
    pods: Mapping[str, Mapping[str, Any] | None],
    now: float,
    max_age: float = DEFAULT_MAX_AGE,
    opt_out_mode: str = "hard",
) -> str:
    """Why the controller must not act on `decision` (new or resumed), or "" when it may.

    Defence in depth: admission lets only the controller write the record, but whatever the
    record says is checked again against the cluster before any victim is touched.
    `pods`: victim key -> the pod of that name now (None: gone). A victim that is gone is done
    (a resumed decision's earlier victims); one that is there must be the recorded pod (uid),
    of lower priority than the preemptor (kube-scheduler's rule: preemption only evicts pods of
    lower priority; pkg/scheduler/framework/preemption) and not protected."""
    if not needs_preemption:
        return "the PodGroup no longer needs preemption"
    if now - decision.decided_at > max_age:
        return f"the record is {now - decision.decided_at:.0f}s old, more than {max_age:g}s"
    if decision.decided_at - now > CLOCK_SKEW:
        return "the record's time is in the future"
    for victim in decision.victims:
        pod = pods.get(victim.key)
        if pod is None:
            continue
        if (pod.get("metadata") or {}).get("uid") != victim.uid:
            return f"victim {victim.key} is not the recorded pod (uid {victim.uid})"
        if _priority(pod) >= preemptor_priority:
            return (
                f"victim {victim.key} has priority {_priority(pod)}, not lower than the PodGroup's "
                f"{preemptor_priority}"
            )
        why = protected(pod, opt_out_mode)
        if why:
            return f"victim {victim.key} is {why}"
    return ""


def foreign_nomination(members: Iterable[Mapping[str, Any]], decision: RecordedDecision | None) -> str:
    """The name of an unbound member carrying a nominatedNodeName priogate did not write (not
    the one its last, unstopped record placed it on), or "". kube-scheduler nominates a pod it
    is preempting for; a gang decision meanwhile would make two preemptors for one pod."""
    ours = dict(decision.placements) if decision is not None and not decision.stopped else {}
    for member in members:
        meta, spec = member.get("metadata") or {}, member.get("spec") or {}
        nominated = (member.get("status") or {}).get("nominatedNodeName")
        if not nominated or spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        if ours.get(meta.get("name")) != nominated:
            return str(meta.get("name") or "")
    return ""
