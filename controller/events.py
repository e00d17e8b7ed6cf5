"""Events (events.k8s.io/v1) about what the controller did, on the objects it did it to.

Events are best effort, as in client-go's recorder: a failed write is logged and never fails
the action the event describes. The controller sends them from a thread of their own
(`asynchronous=True`), as client-go's recorder hands each event to its broadcaster's goroutine
and returns (k8s.io/client-go tools/record/event.go, recorder.generateEvent: ActionOrDrop on a
queue of maxQueuedEvents = 1000, dropping an event when it is full): an Event never delays the
write it describes, such as a victim's DELETE.
"""

from __future__ import annotations

import datetime as dt
import queue
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import structlog

from priogate.clock import micro_time
from priogate.kube.client import ApiClient, resource_path
from priogate.text import escape_untrusted

log = structlog.get_logger("priogate.controller.events")

REPORTING_CONTROLLER = "priogate.io/controller"
NOTE_LIMIT = 1024  # events.k8s.io/v1 refuses longer notes
MAX_QUEUED = 1000  # client-go's maxQueuedEvents
KEYS_KEPT = 10_000  # what Once remembers; cleared when full (an Event again at worst)


class Once:
    """Which (object uid, text) Events were already sent, so a condition seen on every reconcile
    is told once, as client-go's EventCorrelator folds repeats (tools/record/events_cache.go),
    in bounded memory."""

    def __init__(self, kept: int = KEYS_KEPT) -> None:
        self.kept = kept
        self._keys: set[tuple[str, str]] = set()

    def first(self, obj: Mapping[str, Any], text: str) -> bool:
        """Whether this is the first time `text` is told about `obj`; remembers it."""
        key = (str((obj.get("metadata") or {}).get("uid", "")), text)
        if key in self._keys:
            return False
        if len(self._keys) >= self.kept:
            self._keys.clear()
        self._keys.add(key)
        return True


class EventRecorder:
    def __init__(self, client: ApiClient, instance: str, *, asynchronous: bool = False) -> None:
        """`asynchronous`: emit() queues the event for a sender thread and returns at once;
        otherwise emit() writes it before returning (tests read the writes in order)."""
        self.client = client
        self.instance = instance
        self._queue: queue.Queue[dict[str, Any] | None] | None = None
        self._sender: threading.Thread | None = None
        if asynchronous:
            self._queue = queue.Queue(MAX_QUEUED)
            self._sender = threading.Thread(target=self._send_queued, name="events", daemon=True)
            self._sender.start()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most `timeout` seconds), then stop the sender."""
        if self._queue is None or self._sender is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._sender.join(timeout)

    def _send_queued(self) -> None:
        assert self._queue is not None
        while (body := self._queue.get()) is not None:
            self._send(body)

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
            # Escaped before the cut: a note can carry tenant text (a condition's message, a
            # refusal's reason), and kubectl describe and `kubectl priogate why` print notes.
            "note": escape_untrusted(note)[:NOTE_LIMIT],
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
        if self._queue is None:
            self._send(body)
            return
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            log.warning(
                "event queue full, event dropped", reason=reason, object=f"{namespace}/{meta.get('name')}"
            )

    def _send(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        try:
            self.client.create(resource_path("events.k8s.io/v1", "events", namespace), body)
        except Exception as e:  # best effort: an API error or a broken connection alike
            regarding = body["regarding"]
            log.warning(
                "cannot record event",
                reason=body["reason"],
                object=f"{namespace}/{regarding['name']}",
                error=str(e),
            )
