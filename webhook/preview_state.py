"""The preemption preview's cluster state: the preemption engine's live state
(priogate.preemption.live.LiveClusterState, what the controller's preemptors decide on), kept
current from this server's own watch caches, so a preview makes no API call.

It costs nothing until a dry run asks: the state is built from the caches at the first preview.
From then on the caches' watch threads only queue their events (an append: a watch never waits
for the engine, nor for a preview, and the quota rule sets' caches stay as current as without
the preview); the next preview applies the queue, then decides. An event stored in its cache
before seeding read it is also queued, and applying an object the state already holds changes
nothing, so none is lost (the controller's argument, controller/engine_state.py). A queue that
grows past MAX_BACKLOG between previews is dropped with the state, which the next preview builds
again: memory stays bounded however long no one asks.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

import structlog

from priogate.kube.cache import Obj, OnEvent, WatchCache, chained
from priogate.preemption.engine import decide_group, decide_pod
from priogate.preemption.live import LiveClusterState
from priogate.preemption.outcome import Outcome
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy

log = structlog.get_logger("priogate.preview")

# This server's cache names (webhook/view.py sources) -> the kinds LiveClusterState.apply takes.
PREVIEW_CACHES = {
    "nodes": "nodes",
    "preemption-pods": "pods",
    "podgroups": "podgroups",
    "pdbs": "pdbs",
    "priorityclasses": "classes",
}


# Events queued between two previews before the state is dropped instead (each holds an object
# the cache may since have replaced).
MAX_BACKLOG = 100_000


class PreviewState:
    def __init__(self, caches: Mapping[str, WatchCache], policy: PreemptionPolicy = DEFAULT_POLICY) -> None:
        self.caches = caches
        self.policy = policy
        self._lock = threading.Lock()  # one preview at a time: it owns the live state
        self._live: LiveClusterState | None = None
        self._queue_lock = threading.Lock()  # held only to append or take the queue
        self._following = False  # whether events are queued (a state is built or being built)
        self._backlog: deque[tuple[str, str, Obj]] = deque()

    @classmethod
    def attach(cls, caches: Mapping[str, WatchCache]) -> PreviewState:
        """A PreviewState fed by `caches`' events from now on (call before they start)."""
        state = cls(caches)
        for name, kind in PREVIEW_CACHES.items():
            cache = caches[name]
            cache.on_event = chained(state._handler(kind), cache.on_event)
        return state

    def listed(self) -> bool:
        return all(self.caches[name].listed for name in PREVIEW_CACHES)

    def _handler(self, kind: str) -> OnEvent:
        return lambda event_type, obj: self._on_event(kind, event_type, obj)

    def _on_event(self, kind: str, event_type: str, obj: Obj) -> None:
        with self._queue_lock:
            if not self._following:
                return  # no state: the next preview builds one from the caches
            self._backlog.append((kind, event_type, obj))
            if len(self._backlog) > MAX_BACKLOG:
                self._following = False
                self._backlog.clear()

    def _current(self) -> LiveClusterState:
        """The live state with every queued event applied; built from the caches when there is
        none (or the queue overflowed). Called with self._lock held."""
        with self._queue_lock:
            following = self._following
            if not following:
                self._backlog.clear()
                self._following = True  # from here on events queue, before the caches are read
        if not following or self._live is None:
            items = {kind: self.caches[name].items() for name, kind in PREVIEW_CACHES.items()}
            self._live = LiveClusterState(
                nodes=items["nodes"],
                pods=items["pods"],
                podgroups=items["podgroups"],
                pdbs=items["pdbs"],
                priority_classes=items["classes"],
            )
        while True:
            with self._queue_lock:
                batch = list(self._backlog)
                self._backlog.clear()
            if not batch:
                return self._live
            for kind, event_type, obj in batch:
                try:
                    self._live.apply(kind, event_type, obj)
                except Exception:
                    # Malformed objects are skipped inside; anything else is a bug: build the
                    # state again from the caches.
                    log.exception("preview state dropped; rebuilding from the caches", cache=kind)
                    with self._queue_lock:
                        self._following = False
                    return self._current()

    def decide(self, kind: str, obj: Mapping[str, Any], now: float) -> Outcome | None:
        """The engine's decision for `obj` (a pending Pod or an admitted PodGroup, as
        priogate.preemption_preview.pending makes it) on the cluster the caches show, with `obj`
        added; None when the state already holds an object of its key (a create that will fail
        with AlreadyExists: taking it out again would drop the real one)."""
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        cache = "pods" if kind == "Pod" else "podgroups"
        with self._lock:
            live = self._current()
            held = live.current()
            if key in (held.pods if kind == "Pod" else held.groups):
                return None
            live.apply(cache, "ADDED", obj)
            try:
                state = live.current()
                if kind == "Pod":
                    return decide_pod(state, key, policy=self.policy, now=now)
                return decide_group(state, key, policy=self.policy)
            finally:
                live.apply(cache, "DELETED", obj)
