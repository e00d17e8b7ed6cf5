"""The PodGroup reconciler: cache state in, the phase function's status out, written to the
status subresource only when it changed, with the resourceVersion read (409: re-read the
object from the API server, recompute, write again). Then gang preemption, if the group
needs it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from controller.caches import Caches
from controller.enqueue_view import EnqueueInputs, EnqueueView
from controller.events import EventRecorder
from controller.gang_preemptor import GangPreemptor
from controller.gates import GateLifter
from controller.over_quota import OverQuota
from controller.overuse import OverusedEvictor
from controller.victims import NotLeader
from priogate import enqueue, gate, phase
from priogate import preemption_record as record
from priogate.clock import rfc3339
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL, Phase

log = structlog.get_logger("priogate.controller.reconcile")

MAX_CONFLICT_RETRIES = 5


class Reconciler:
    def __init__(
        self,
        client: ApiClient,
        caches: Caches,
        preemptor: GangPreemptor | None,
        is_leader: Callable[[], bool] = lambda: True,
        events: EventRecorder | None = None,
        *,
        inqueue_timeout: float = 0.0,
        enqueue_backoff: float = 0.0,
        enqueue_gate: bool = True,
        enqueue_order: str = "priority",
        gates: GateLifter | None = None,
        requeue: Callable[[str, float], None] | None = None,
        evictor: OverusedEvictor | None = None,
    ) -> None:
        self.client = client
        # --enqueue: False admits every group at once (no Inqueue wait, so no gate holds a
        # member for long); the phases are still written.
        self.enqueue_gate = enqueue_gate
        self.gates = gates
        self.evictor = evictor  # --evict-overused
        self.requeue = requeue  # (namespace/name, seconds): look at a group's key again then
        self.inqueue_timeout = inqueue_timeout
        self.enqueue_backoff = enqueue_backoff
        # When each Inqueue group was first seen stuck: members unschedulable and no preemption
        # possible. In memory: a new leader starts the clock again (the rollback comes later,
        # never earlier).
        self._stuck: dict[str, float] = {}
        self.events = events
        self.is_leader = is_leader
        self.caches = caches
        self.preemptor = preemptor
        self.view = EnqueueView(caches, enqueue_backoff, enqueue_order)
        self._over_quota = OverQuota(caches)

    # ---- inputs of the phase and enqueue functions ---------------------------------------------

    def members(self, namespace: str, name: str) -> list[Mapping[str, Any]]:
        return list(self.view.members(namespace).get(name, ()))

    def demand(self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> enqueue.GroupDemand:
        return self.view.demand(group, members)

    def _cluster(self) -> EnqueueInputs:
        return self.view.get()

    def enqueue_verdict(self, demand: enqueue.GroupDemand) -> phase.EnqueueVerdict:
        if not self.enqueue_gate:
            return phase.EnqueueVerdict(True, "enqueue disabled (--enqueue=false)")
        if demand.phase == Phase.INQUEUE and enqueue.inqueue_timed_out(
            self._stuck.get(demand.key), time.monotonic(), self.inqueue_timeout
        ):
            return phase.EnqueueVerdict(
                False,
                f"Inqueue for more than {self.inqueue_timeout:g}s with members unschedulable and no "
                "preemption possible; enqueued again after a back-off",
                phase.INQUEUE_TIMEOUT,
            )
        early = enqueue.before_the_view(demand)
        if early is not None:
            return early
        try:
            return self._cluster().verdicts.verdict(demand)
        except ValueError as e:  # a malformed quota: hold the group back and say why
            return phase.EnqueueVerdict(False, str(e))

    # ---- the reconcile -------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> str:
        """One PodGroup. Returns the result label for metrics."""
        group = self.caches.podgroups.get(namespace, name)
        # One pass over the namespace's pods serves the status, the count and the preemptor; a
        # status conflict is about the PodGroup object, so a retry reuses the members.
        members = self.members(namespace, name) if group is not None else []
        result = "unchanged"
        for _ in range(MAX_CONFLICT_RETRIES):
            if group is None or (group.get("metadata") or {}).get("deletionTimestamp"):
                self._stuck.pop(f"{namespace}/{name}", None)
                if group is None:
                    self._orphans(namespace, name, members)
                return "gone"
            status = self.desired_status(group, members)
            if status == (group.get("status") or {}):
                break
            if not self.is_leader():
                return "not-leader"  # lost the lease since the worker took the key
            try:
                group = self._write_status(group, status)
                result = "updated"
                break
            except ApiError as e:
                if e.status == 404:
                    self._stuck.pop(f"{namespace}/{name}", None)
                    return "gone"
                if e.status != 409:
                    raise
                log.info("status write conflicted; re-reading", podgroup=f"{namespace}/{name}")
                group = self._fresh(namespace, name)
        else:
            return "conflict"
        admitted = group is not None and gate.admitted((group.get("status") or {}).get("phase"))
        if self.gates is not None and admitted and self.is_leader():
            self.gates.lift(members)
        if self._evict_overused(group, members):
            result = "evicted-overused"
        outcome = ""
        if self.preemptor is not None and group is not None:
            scheduled = phase.count_members(members).scheduled
            try:
                outcome = self.preemptor.handle(group, members, scheduled)
            except NotLeader:
                return "not-leader"
            if outcome in ("preempted", "resumed"):
                result = outcome
        self._track_stuck(f"{namespace}/{name}", group, members, outcome)
        return result

    def _evict_overused(self, group: Mapping[str, Any] | None, members: Sequence[Mapping[str, Any]]) -> bool:
        """--evict-overused, for a group still waiting: the surplus of its namespace's overused
        groups, when that alone keeps it out (controller/overuse.py)."""
        if self.evictor is None or group is None or not self.enqueue_gate or not self.is_leader():
            return False
        if (group.get("status") or {}).get("phase") != Phase.PENDING:
            return False
        namespace = group["metadata"]["namespace"]
        by_group = self.view.members(namespace)
        try:
            evicted = self.evictor.handle(
                group,
                self.demand(group, members),
                self._cluster().verdicts,
                by_group,
                lambda other: self.demand(other, by_group.get(other["metadata"]["name"], ())),
            )
        except NotLeader:
            return False
        if evicted and self.requeue is not None:
            # Look again once they are gone, rather than at the next resync.
            self.requeue(f"{namespace}/{group['metadata']['name']}", 2.0)
        return bool(evicted)

    def _orphans(self, namespace: str, name: str, members: Sequence[Mapping[str, Any]]) -> None:
        """Members gated for a group that does not exist (members was read with the group gone)."""
        if self.gates is None or not self.is_leader():
            return
        members = members or self.members(namespace, name)
        next_due = self.gates.orphans(namespace, name, members)
        if next_due is not None and self.requeue is not None:
            self.requeue(f"{namespace}/{name}", next_due)

    def _track_stuck(
        self, key: str, group: Mapping[str, Any] | None, members: Sequence[Mapping[str, Any]], outcome: str
    ) -> None:
        """Start (or keep) the Inqueue-timeout clock of a group that is Inqueue with no member
        bound, a member the scheduler could not place, and no preemption possible (the engine
        found none, its decision failed the re-check, or gang preemption is off); stop it
        otherwise."""
        status = (group or {}).get("status") or {}
        counts = phase.count_members(members)
        stuck = (
            status.get("phase") == Phase.INQUEUE
            and counts.scheduled == 0
            and any(record.unschedulable(m) for m in members)
            and (self.preemptor is None or outcome in ("unresolved", "refused"))
        )
        if stuck:
            self._stuck.setdefault(key, time.monotonic())
        else:
            self._stuck.pop(key, None)

    def desired_status(
        self, group: Mapping[str, Any], members: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        counts = phase.count_members(members)
        current = (group.get("status") or {}).get("phase") or ""
        if current in ("", Phase.PENDING, Phase.INQUEUE):
            verdict = self.enqueue_verdict(self.demand(group, members))
        else:
            verdict = phase.EnqueueVerdict(True)  # not consulted once a group is past Inqueue
        min_member = int((group.get("spec") or {}).get("minMember") or 0)
        now = rfc3339(dt.datetime.now(dt.UTC))
        over = self.over_quota(group["metadata"].get("namespace", ""))
        return phase.next_status(group.get("status"), min_member, counts, verdict, now, over)

    def over_quota(self, namespace: str) -> str | None:
        """Whether a quota was lowered below the namespace's stored groups' reservations."""
        return self._over_quota.answer(namespace)

    def _path(self, namespace: str, name: str) -> str:
        return resource_path(GROUP_VERSION, PLURAL, namespace, name)

    def _write_status(self, group: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        meta = group["metadata"]
        body = {**group, "status": status}  # metadata.resourceVersion as read: the precondition
        written = self.client.replace(self._path(meta["namespace"], meta["name"]) + "/status", body)
        # Seen at once by the next reconcile (FCFS enqueue must count this group's reservation),
        # not only when the watch delivers it.
        self.caches.podgroups.apply_event("MODIFIED", written)
        old, new = (group.get("status") or {}).get("phase"), status.get("phase")
        log.info(
            "podgroup status",
            podgroup=f"{meta['namespace']}/{meta['name']}",
            phase=new,
            previous=old or "",
            running=status.get("running"),
        )
        for event, action in (
            (phase.phase_event(group.get("status"), status), "UpdatePhase"),
            (phase.quota_event(group.get("status"), status), "CheckQuota"),
        ):
            if event is not None and self.events is not None:
                self.events.emit(
                    written,
                    "PodGroup",
                    GROUP_VERSION,
                    type_=event.type,
                    reason=event.reason,
                    action=action,
                    note=event.note,
                )
        return written

    def _fresh(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(self._path(namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise
