"""Gang preemption applied: snapshot from the caches, the engine's decision for one PodGroup,
then the writes, in an order that survives a crash at any point:

1. record the decision on the PodGroup (annotation, resourceVersion precondition): the commit
   point; a conflict here means nothing was touched and the next reconcile starts over;
2. per victim: DisruptionTarget condition (pods/status), an Event, DELETE with a uid
   precondition (a pod of the same name created since is not a victim): controller/victims.py,
   the writes the pod preemptor makes too;
3. status.nominatedNodeName on the members the decision placed;
4. mark the record applied, and an Event on the PodGroup.

A restart between 1 and 4 finds the record unapplied and repeats 2 to 4 for the same victims;
every step is harmless to repeat (404 and uid mismatches mean "already done").

Nothing is acted on blindly, whoever wrote the record (admission lets only the controller write
it; webhook/rules/podgroup_annotations.py): before a decision is recorded or a recorded one is
resumed, preemption_record.refusal checks it again against the caches (the group still needs
it, the record is recent, every victim still there is the recorded pod, of lower priority than
the group, not protected), and before each victim the group is read again from the API server,
so a group deleted mid-way stops the deletions. A refusal is a Warning Event on the PodGroup
and, for a record, marks it stopped so it is never resumed.

One preemptor per pod: while a member carries a nominatedNodeName priogate did not write,
kube-scheduler is preempting for that pod (its PostFilter nominates the preemptor;
pkg/scheduler/framework/preemption), and no gang decision is taken until it is done.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from controller.caches import Caches
from controller.engine_state import EngineState
from controller.events import EventRecorder, Once
from controller.victims import MERGE_PATCH, NotLeader, Preemptor, Taken, VictimWriter
from priogate import preemption_record as record
from priogate import priority as prio
from priogate.clock import micro_time
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.preemption.engine import gang_priority
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption_record import RecordedDecision, Step, Victim

log = structlog.get_logger("priogate.controller.preemption")


class Stopped(Exception):
    """The preemptor group went away (or its record changed) mid-way: no further victim."""


class GangPreemptor:
    def __init__(
        self,
        client: ApiClient,
        caches: Caches,
        events: EventRecorder,
        is_leader: Callable[[], bool],
        *,
        policy: PreemptionPolicy = DEFAULT_POLICY,
        retry_after: float = record.DEFAULT_RETRY_AFTER,
        max_age: float = record.DEFAULT_MAX_AGE,
        on_applied: Callable[[int], None] = lambda victims: None,
        engine: EngineState | None = None,
    ) -> None:
        self.client = client
        self.caches = caches
        # Decisions read the engine state kept current from the caches' events, not a snapshot
        # rebuilt from every cached object per decision.
        self.engine = engine or EngineState.attach(caches)
        self.events = events
        self.is_leader = is_leader
        self.policy = policy
        self.retry_after = retry_after
        self.max_age = max_age
        self.on_applied = on_applied
        self.writer = VictimWriter(client, caches.pods.get, events, self._guard)
        self._told = Once()  # (group uid, note) told by _tell_priority

    def handle(self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]], scheduled: int) -> str:
        meta = group["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        try:
            decision = record.recorded(group)
        except ValueError as e:
            log.warning("ignoring an unreadable preemption record", podgroup=key, error=str(e))
            decision = None
        phase = (group.get("status") or {}).get("phase") or ""
        min_member = int((group.get("spec") or {}).get("minMember") or 0)
        needs = record.needs_preemption(phase, min_member, scheduled, members)
        present = {
            v.uid
            for v in (decision.victims if decision else ())
            if (self.caches.pods.get(v.namespace, v.name) or {}).get("metadata", {}).get("uid") == v.uid
        }
        step = record.next_step(decision, needs, present, time.time(), self.retry_after)
        if step is Step.RESUME and decision is not None:
            why = self._refusal(group, members, decision, needs)
            if why:
                self._refuse(group, decision, why, recorded=True)
                return "refused"
            log.info("resuming a recorded preemption", podgroup=key, decision=decision.id)
            return self._applied_or_stopped(group, decision, "resumed")
        if step is not Step.DECIDE:
            return step.value
        self._tell_priority(group, members)
        foreign = record.foreign_nomination(members, decision)
        if foreign:
            log.info(
                "kube-scheduler is preempting for a member; no gang decision", podgroup=key, member=foreign
            )
            return "foreign-nomination"
        decision = self._decide(group, key)
        if decision is None:
            return "unresolved"
        if isinstance(decision, str):
            self._tell_refused(group, decision)
            return "refused"
        why = self._refusal(group, members, decision, needs)
        if why:
            self._refuse(group, decision, why, recorded=False)
            return "refused"
        group = self._record(group, decision)
        return self._applied_or_stopped(group, decision, "preempted")

    def _applied_or_stopped(self, group: Mapping[str, Any], decision: RecordedDecision, result: str) -> str:
        try:
            self._apply(group, decision)
        except Stopped as e:
            self._warn(group, f"gang preemption {decision.id} stopped: {e}; no further pod deleted")
            return "stopped"
        return result

    # ---- re-checking ---------------------------------------------------------------------------

    def _priority(self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> tuple[int, str]:
        """The group's priority as the engine ranks it (engine.gang_priority): its unplaced
        members' lowest admitted priority, never above its class's value; and why it is not
        that value."""
        class_name = (group.get("spec") or {}).get("priorityClassName") or ""
        pc = self.caches.classes.get("", class_name) if class_name else None
        values = [
            (m.get("spec") or {}).get("priority")
            for m in members
            if not (m.get("spec") or {}).get("nodeName")
            and not (m.get("metadata") or {}).get("deletionTimestamp")
        ]
        return gang_priority(
            prio.class_value(pc) if pc is not None else None,
            [v for v in values if isinstance(v, int) and not isinstance(v, bool)],
        )

    def _tell_priority(self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> None:
        """A Warning Event, once per group and text, when its members' priority is not its
        class's: the gang preempts at what its members were admitted with, never at a class
        they were not allowed."""
        _, note = self._priority(group, members)
        if not note or not self._told.first(group, note):
            return
        self.events.emit(
            group,
            "PodGroup",
            GROUP_VERSION,
            type_="Warning",
            reason="MemberPriority",
            action="Preempt",
            note=f"gang preemption: {note}",
        )

    def _tell_refused(self, group: Mapping[str, Any], why: str) -> None:
        """A Warning Event, once per group and reason, when the engine would not decide: a
        member's pod (anti-)affinity or a pod's anti-affinity against the members is one it
        cannot model (priogate/preemption/gang_fit.py), so any victim set could be wrong."""
        if self._told.first(group, why):
            self._warn(group, f"gang preemption refused: {why}; no pod preempted")

    def _refusal(
        self,
        group: Mapping[str, Any],
        members: Sequence[Mapping[str, Any]],
        decision: RecordedDecision,
        needs: bool,
    ) -> str:
        pods = {v.key: self.caches.pods.get(v.namespace, v.name) for v in decision.victims}
        return record.refusal(
            decision,
            needs_preemption=needs,
            preemptor_priority=self._priority(group, members)[0],
            pods=pods,
            now=time.time(),
            max_age=self.max_age,
            opt_out_mode=self.policy.opt_out_mode,
        )

    def _refuse(
        self, group: Mapping[str, Any], decision: RecordedDecision, why: str, *, recorded: bool
    ) -> None:
        meta = group["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        log.warning("gang preemption refused", podgroup=key, decision=decision.id, reason=why)
        if recorded:
            # Closed, so it is never resumed, and its victims are not waited for.
            self._mark(group, decision, decision.stop(why))
        victims = ", ".join(v.key for v in decision.victims)
        self._warn(group, f"gang preemption {decision.id} refused: {why}; victims left alone: {victims}")

    def _warn(self, group: Mapping[str, Any], note: str) -> None:
        self.events.emit(
            group,
            "PodGroup",
            GROUP_VERSION,
            type_="Warning",
            reason="PreemptionRefused",
            action="Preempt",
            note=note,
        )

    def _check_group(self, group: Mapping[str, Any], decision: RecordedDecision) -> None:
        """Read the group again before touching a victim: deleted (or replaced) mid-way, or its
        record changed under us, and the preemption stops."""
        try:
            current = self.client.get(self._group_path(group))
        except ApiError as e:
            if e.status == 404:
                raise Stopped("the PodGroup was deleted") from None
            raise
        meta = current.get("metadata") or {}
        if meta.get("uid") != group["metadata"].get("uid") or meta.get("deletionTimestamp"):
            raise Stopped("the PodGroup was deleted")
        try:
            now_recorded = record.recorded(current)
        except ValueError:
            now_recorded = None
        if now_recorded is None or now_recorded.id != decision.id or now_recorded.stopped:
            raise Stopped("the PodGroup's preemption record changed")

    # ---- deciding ------------------------------------------------------------------------------

    def _decide(self, group: Mapping[str, Any], key: str) -> RecordedDecision | str | None:
        """The decision to record; or why the engine refused to decide (a constraint it does
        not model); or None when there is nothing to preempt."""
        outcome = self.engine.decide(key, policy=self.policy)
        if outcome.refused:
            log.info("gang preemption refused", podgroup=key, reason=outcome.refused)
            return outcome.refused
        if outcome.status != "preempt" or not outcome.victims:
            log.info("no gang preemption", podgroup=key, status=outcome.status, reason=outcome.reason)
            return None
        victims = []
        for v in outcome.victims:
            uid = (self.caches.pods.get(v.namespace, v.name) or {}).get("metadata", {}).get("uid", "")
            victims.append(Victim(v.namespace, v.name, uid, v.node_name))
        placements = {pod_key.split("/", 1)[1]: node for pod_key, node in outcome.placements.items()}
        return RecordedDecision(
            uuid.uuid4().hex[:12], time.time(), tuple(victims), placements, outcome.reason
        )

    # ---- writing -------------------------------------------------------------------------------

    def _guard(self) -> None:
        if not self.is_leader():
            raise NotLeader("leadership lost during a gang preemption")

    def _group_path(self, group: Mapping[str, Any]) -> str:
        meta = group["metadata"]
        return resource_path(GROUP_VERSION, PLURAL, meta["namespace"], meta["name"])

    def _patch_annotation(self, group: Mapping[str, Any], decision: RecordedDecision) -> dict[str, Any]:
        body = {
            "metadata": {
                "resourceVersion": group["metadata"]["resourceVersion"],  # precondition
                "annotations": {record.ANNOTATION: decision.to_annotation()},
            }
        }
        self._guard()
        written = self.client.request("PATCH", self._group_path(group), body=body, content_type=MERGE_PATCH)
        self.caches.podgroups.apply_event("MODIFIED", written)
        return written

    def _record(self, group: Mapping[str, Any], decision: RecordedDecision) -> dict[str, Any]:
        """The commit point. A 409 propagates: nothing was touched, the reconcile is retried."""
        written = self._patch_annotation(group, decision)
        log.info(
            "recorded a gang preemption",
            podgroup=f"{group['metadata']['namespace']}/{group['metadata']['name']}",
            decision=decision.id,
            victims=[v.key for v in decision.victims],
            nominated=dict(decision.placements),
        )
        return written

    def _apply(self, group: Mapping[str, Any], decision: RecordedDecision) -> None:
        meta = group["metadata"]
        preemptor = f"{meta['namespace']}/{meta['name']}"
        by = Preemptor(
            "PodGroup",
            GROUP_VERSION,
            group,
            f"preempted by priogate to make room for PodGroup {preemptor}",
            event_type="Warning",
        )
        now = micro_time(dt.datetime.now(dt.UTC))
        for victim in decision.victims:
            self._check_group(group, decision)
            if self.writer.take_or_evict(victim, by, now, pdb_mode=self.policy.pdb_mode) is Taken.BLOCKED:
                log.warning(
                    "a gang victim's eviction was refused by a PodDisruptionBudget", victim=victim.key
                )
        for name, node in sorted(decision.placements.items()):
            member = self.caches.pods.get(meta["namespace"], name)
            if member is None or (member.get("spec") or {}).get("nodeName"):
                continue  # gone, or bound already: a nomination is moot (and refused)
            self.writer.nominate(meta["namespace"], name, node)
        self._mark_applied(group, decision)
        self.on_applied(len(decision.victims))
        victims = ", ".join(v.key for v in decision.victims)
        self.events.emit(
            group,
            "PodGroup",
            GROUP_VERSION,
            type_="Normal",
            reason="Preempted",
            action="Preempt",
            note=f"preempted {len(decision.victims)} pod(s) for the gang: {victims}; {decision.reason}",
        )

    def _mark_applied(self, group: Mapping[str, Any], decision: RecordedDecision) -> None:
        self._mark(group, decision, decision.done())

    def _mark(self, group: Mapping[str, Any], decision: RecordedDecision, new: RecordedDecision) -> None:
        """Replace our record with `new` (applied, or stopped), against a fresh read."""
        path = self._group_path(group)
        for _ in range(5):
            try:
                current = self.client.get(path)
            except ApiError as e:
                if e.status == 404:
                    return  # the group is gone, and its record with it
                raise
            try:
                mine = record.recorded(current)
            except ValueError:
                mine = None
            if mine is None or mine.id != decision.id:
                return  # replaced meanwhile: nothing of ours to mark
            try:
                self._patch_annotation(current, new)
                return
            except ApiError as e:
                if e.status == 404:
                    return
                if e.status != 409:
                    raise
        raise ApiError(409, "Conflict", f"could not update preemption record {decision.id}: kept conflicting")
