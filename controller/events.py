"""Events (events.k8s.io/v1) about what the controller did, on the objects it did it to.

Events are best effort, as in client-go's recorder: a failed write is logged and never fails
the action the event describes.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

import structlog

from priogate.clock import micro_time
from priogate.kube.client import ApiClient, ApiError, resource_path

log = structlog.get_logger("priogate.controller.events")

REPORTING_CONTROLLER = "priogate.io/controller"
NOTE_LIMIT = 1024  # events.k8s.io/v1 refuses longer notes


class EventRecorder:
    def __init__(self, client: ApiClient, instance: str) -> None:
        self.client = client
        self.instance = instance

    def emit(
        self,
        regarding: Mapping[str, Any],
        kind: str,
        api_version: str,
        *,
        type_: str,
        reason: str,
        action: str,
        note: str,
        related: tuple[Mapping[str, Any], str, str] | None = None,
    ) -> None:
        """`related`: (object, kind, apiVersion) of a second object the event concerns, as
        kube-scheduler names the preemptor on a victim's Preempted event (Eventf(victim,
        preemptor, ...) in pkg/scheduler/framework/preemption/executor.go)."""
        meta = regarding.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object's name, a dot, a unique suffix (generateName may not
            # end with a dot, so the suffix is made here).
            "metadata": {
                "name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "eventTime": micro_time(dt.datetime.now(dt.UTC)),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance[:128],
            "action": action,
            "reason": reason,
            "note": note[:NOTE_LIMIT],
            "type": type_,
            "regarding": {
                "apiVersion": api_version,
                "kind": kind,
                "namespace": namespace,
                "name": meta.get("name", ""),
                "uid": meta.get("uid", ""),
            },
        }
        if related is not None:
            obj, related_kind, related_version = related
            related_meta = obj.get("metadata") or {}
            body["related"] = {
                "apiVersion": related_version,
                "kind": related_kind,
                "namespace": related_meta.get("namespace", ""),
                "name": related_meta.get("name", ""),
                "uid": related_meta.get("uid", ""),
            }
        try:
            self.client.create(resource_path("events.k8s.io/v1", "events", namespace), body)
        except ApiError as e:
            log.warning(
                "cannot record event", reason=reason, object=f"{namespace}/{meta.get('name')}", error=str(e)
            )
