"""Delay Pod Creation, the controller's side (priogate.gate): the scheduling gate is lifted from
a PodGroup's members once the group is admitted, and from the members of a group that does not
appear within --gate-orphan-seconds, with an Event that says so.

Each lift is one strategic merge patch that deletes the gate by name (idempotent: a member
already lifted, or gone, costs nothing). Only the controller's identity may do it
(webhook/rules/pod_gate_guard.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from controller.events import EventRecorder
from priogate import gate
from priogate.clock import epoch_seconds
from priogate.kube.client import ApiClient, ApiError, resource_path

log = structlog.get_logger("priogate.controller.gates")

STRATEGIC_MERGE = "application/strategic-merge-patch+json"


class GateLifter:
    def __init__(
        self,
        client: ApiClient,
        events: EventRecorder | None,
        orphan_seconds: float = gate.DEFAULT_ORPHAN_SECONDS,
    ) -> None:
        self.client = client
        self.events = events
        self.orphan_seconds = orphan_seconds

    def lift(self, members: Sequence[Mapping[str, Any]]) -> int:
        """Lift the gate of every gated member; how many were lifted."""
        lifted = 0
        for pod in members:
            if gate.has_gate(pod) and self._lift_one(pod):
                lifted += 1
        return lifted

    def orphans(self, namespace: str, group: str, members: Sequence[Mapping[str, Any]]) -> float | None:
        """Members gated for a group that does not exist: lift those that waited the bound, with a
        Warning Event each; the seconds until the next one is due (None: no other waits)."""
        gated = {p["metadata"]["name"]: p for p in members if gate.has_gate(p)}
        waiting = []
        for name, pod in gated.items():
            try:
                waiting.append((name, epoch_seconds(str(pod["metadata"].get("creationTimestamp") or ""))))
            except ValueError:
                waiting.append((name, 0.0))  # no creation time: it waited long enough
        due, next_due = gate.orphans_due(waiting, time.time(), self.orphan_seconds)
        for name in due:
            pod = gated[name]
            if self._lift_one(pod) and self.events is not None:
                self.events.emit(
                    pod,
                    "Pod",
                    "v1",
                    type_="Warning",
                    reason="PodGroupMissing",
                    action="LiftGate",
                    note=f"PodGroup {namespace}/{group} does not exist after {self.orphan_seconds:g}s: "
                    f"scheduling gate {gate.GATE} lifted, the pod is scheduled on its own",
                )
        return next_due

    def _lift_one(self, pod: Mapping[str, Any]) -> bool:
        meta = pod["metadata"]
        path = resource_path("v1", "pods", meta["namespace"], meta["name"])
        try:
            self.client.request("PATCH", path, body=gate.lift_patch(), content_type=STRATEGIC_MERGE)
        except ApiError as e:
            if e.status in (404, 409):
                return False  # gone, or replaced: its own event brings it back if still gated
            raise
        log.info("scheduling gate lifted", pod=f"{meta['namespace']}/{meta['name']}")
        return True
