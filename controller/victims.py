"""The writes a preemption makes, shared by the gang preemptor and the pod preemptor.

As kube-scheduler applies a preemption (pkg/scheduler/framework/preemption/executor.go,
PreemptPod and prepareCandidateAsync):
- each victim gets a DisruptionTarget condition (pods/status), then is deleted with its own
  grace period (an empty DeleteOptions, as util.DeletePod), here with a uid precondition so a
  pod created since under the same name is never the one deleted;
- then an Event "Preempted" on the victim names the preemptor;
- lower-priority pods nominated to the preemptor's node lose their nomination
  (getLowerPriorityNominatedPods / clearNominatedNodeName);
- the preemptor is nominated to its node (status.nominatedNodeName).

`evict` is the Eviction API path (policy/v1, POST pods/NAME/eviction) for a strict
PodDisruptionBudget mode: kube-apiserver refuses an eviction a PDB does not allow (429), and
sets the DisruptionTarget condition itself (reason EvictionByEvictionAPI;
pkg/registry/core/pod/storage/eviction.go), so no condition is written first.

Every write checks leadership first (`guard` raises when it is lost), and treats 404 (gone)
and a failed uid precondition (409, or 422 "metadata.uid ... field is immutable" for a patch
that names another uid) as "already done": the victim or pod it was for is not there any more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog

from controller.events import EventRecorder
from priogate import preemption_record as record
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.preemption_record import Victim

log = structlog.get_logger("priogate.controller.victims")

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


def uid_refused(e: ApiError) -> bool:
    """kube-apiserver's answer to a patch whose metadata.uid is not the stored object's."""
    return e.status == 422 and "metadata.uid" in e.message


def gone(e: ApiError) -> bool:
    """The object a write was for is gone or was replaced (404, a failed uid precondition)."""
    return e.status in (404, 409) or uid_refused(e)


class NotLeader(Exception):
    """Leadership was lost mid-way: stop writing (a gang's record lets the next leader finish;
    a single pod is decided again)."""


class Taken(Enum):
    DELETED = "deleted"  # deleted (or evicted) now
    GONE = "gone"  # already gone, replaced by another pod, or already terminating
    BLOCKED = "blocked"  # the Eviction API refused: a PodDisruptionBudget does not allow it


@dataclass(frozen=True)
class Preemptor:
    """Who the victims make room for, as their condition and Event name it."""

    kind: str  # "PodGroup" or "Pod"
    api_version: str
    obj: Mapping[str, Any]  # the preemptor object (the Event's `related`)
    victim_note: str  # the note of the victim's Preempted Event
    event_type: str = "Normal"
    # The victim's Event: kube-scheduler's "Preempted", or what the overused-group eviction says.
    victim_reason: str = "Preempted"
    victim_action: str = "Preempt"

    @property
    def key(self) -> str:
        meta = self.obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass(frozen=True)
class Marked:
    """A victim after VictimWriter.mark: `pod` is what its condition was written on (None: the
    cache showed it gone or terminating, so no condition); `gone`: the write found it gone or
    replaced, so there is nothing to delete."""

    victim: Victim
    pod: Mapping[str, Any] | None
    gone: bool = False


class VictimWriter:
    def __init__(
        self,
        client: ApiClient,
        pods: Callable[[str, str], Mapping[str, Any] | None],
        events: EventRecorder,
        guard: Callable[[], None],
    ) -> None:
        """`pods(namespace, name)`: the pod as the caches hold it (None: not there)."""
        self.client = client
        self.pods = pods
        self.events = events
        self.guard = guard

    def _current(self, victim: Victim) -> Mapping[str, Any] | None:
        """The victim as cached, if it is still the recorded pod and not terminating."""
        pod = self.pods(victim.namespace, victim.name)
        if pod is None:
            return None
        meta = pod.get("metadata") or {}
        if meta.get("uid") != victim.uid or meta.get("deletionTimestamp"):
            return None
        return pod

    def take(self, victim: Victim, by: Preemptor, now: str) -> Taken:
        """DisruptionTarget condition, uid-preconditioned DELETE, Preempted Event."""
        return self.remove(self.mark(victim, by, now), by)

    def mark(self, victim: Victim, by: Preemptor, now: str) -> Marked:
        """The DisruptionTarget condition, the first half of take()."""
        pod = self._current(victim)
        if pod is None:
            return Marked(victim, None)  # gone or terminating as cached: the DELETE makes sure
        self.guard()
        try:
            # Strategic merge: conditions merge by type, so others' conditions stay.
            # metadata.uid in the body is a precondition: uid is immutable, so kube-apiserver
            # refuses to patch a pod of that name with another uid (422 "metadata.uid ...
            # field is immutable"; tests/e2e/test_controller_trust.py shows it).
            self.client.request(
                "PATCH",
                resource_path("v1", "pods", victim.namespace, victim.name) + "/status",
                body={
                    "metadata": {"uid": victim.uid},
                    "status": {"conditions": [record.disruption_condition(now, by.key, by.kind)]},
                },
                content_type=STRATEGIC_PATCH,
            )
        except ApiError as e:
            if gone(e):
                log.info("victim gone or replaced", pod=victim.key, status=e.status)
                return Marked(victim, None, gone=True)
            raise
        return Marked(victim, pod)

    def remove(self, marked: Marked, by: Preemptor) -> Taken:
        """The uid-preconditioned DELETE and the Preempted Event, the second half of take()."""
        if marked.gone:
            return Taken.GONE
        victim = marked.victim
        self.guard()
        try:
            self.client.delete(
                resource_path("v1", "pods", victim.namespace, victim.name), preconditions={"uid": victim.uid}
            )
        except ApiError as e:
            # 404: gone already; 409: the uid precondition failed, a new pod took the name.
            if e.status not in (404, 409):
                raise
            return Taken.GONE
        if marked.pod is None:
            return Taken.GONE
        # After the DELETE, as kube-scheduler records it (executor.go PreemptPod): the Event
        # never delays the victim's deletion.
        self._preempted_event(marked.pod, by)
        return Taken.DELETED

    def take_or_evict(self, victim: Victim, by: Preemptor, now: str, *, pdb_mode: str) -> Taken:
        """`take`, or under --pdb-mode strict `evict`: the engine chose no PDB-violating victim
        from what the caches showed, and the Eviction API keeps that true if a PDB changed."""
        return self.evict(victim, by) if pdb_mode == "strict" else self.take(victim, by, now)

    def evict(self, victim: Victim, by: Preemptor) -> Taken:
        """The Eviction API (policy/v1) with a uid precondition: never violates a PDB."""
        pod = self._current(victim)
        if pod is None:
            return Taken.GONE
        self.guard()
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": victim.name, "namespace": victim.namespace},
            "deleteOptions": {"preconditions": {"uid": victim.uid}},
        }
        try:
            self.client.request(
                "POST", resource_path("v1", "pods", victim.namespace, victim.name) + "/eviction", body=body
            )
        except ApiError as e:
            if e.status == 429:
                log.info("eviction refused by a PodDisruptionBudget", pod=victim.key, message=e.message)
                return Taken.BLOCKED
            if gone(e):
                return Taken.GONE
            raise
        self._preempted_event(pod, by)
        return Taken.DELETED

    def _preempted_event(self, pod: Mapping[str, Any], by: Preemptor) -> None:
        self.events.emit(
            pod,
            "Pod",
            "v1",
            type_=by.event_type,
            reason=by.victim_reason,
            action=by.victim_action,
            note=by.victim_note,
            related=(by.obj, by.kind, by.api_version),
        )

    def nominate(self, namespace: str, name: str, node: str, uid: str | None = None) -> bool:
        """status.nominatedNodeName on a pending pod; False when it is gone, replaced (`uid`)
        or bound since the cache saw it (422 "may not be set on pods that are already bound")."""
        return self._set_nomination(namespace, name, node, uid, refused=(404, 409, 422))

    def clear_nomination(self, pod: Mapping[str, Any]) -> bool:
        """Drop a pending pod's nomination (clearNominatedNodeName); False when it is gone,
        replaced, or bound meanwhile."""
        meta = pod.get("metadata") or {}
        return self._set_nomination(
            meta.get("namespace", ""), meta.get("name", ""), None, meta.get("uid"), refused=(404, 409, 422)
        )

    def _set_nomination(
        self, namespace: str, name: str, node: str | None, uid: str | None, refused: tuple[int, ...]
    ) -> bool:
        self.guard()
        body: dict[str, Any] = {"status": {"nominatedNodeName": node}}
        if uid:
            body["metadata"] = {"uid": uid}
        path = resource_path("v1", "pods", namespace, name) + "/status"
        try:
            self.client.request("PATCH", path, body=body, content_type=MERGE_PATCH)
        except ApiError as e:
            if e.status not in refused:
                raise
            log.info("nomination not changed", pod=f"{namespace}/{name}", node=node, status=e.status)
            return False
        return True
