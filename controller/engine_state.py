"""The preemption engine's state kept current from the controller's watch caches, so a gang
or single-pod decision does not rebuild the whole snapshot (priogate.preemption.live).

`EngineState.attach(caches)` chains a callback onto the five caches preemption reads (before
they start), and seeds the live state from their contents on first use. One lock serializes
watch events and decisions: a ClusterState from LiveClusterState.current() is valid until
the next event. Seeding holds the lock while reading the caches, and every event is stored
in its cache before its callback runs, so an event is either in what seeding reads, or
applied after it (applying an object the state already holds changes nothing): none is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

import structlog

from controller.caches import Caches
from priogate.kube.cache import Obj, OnEvent, WatchCache, chained
from priogate.preemption.engine import decide_group, decide_pod
from priogate.preemption.live import LiveClusterState
from priogate.preemption.outcome import Outcome
from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy
from priogate.preemption.state import ClusterState

T = TypeVar("T")

log = structlog.get_logger("priogate.controller.engine_state")

# The caches preemption reads, by the names LiveClusterState.apply takes.
ENGINE_CACHES = ("nodes", "pods", "podgroups", "pdbs", "classes")


class EngineState:
    def __init__(self, caches: Caches) -> None:
        self.caches = caches
        self._lock = threading.Lock()
        self._live: LiveClusterState | None = None
        self._skipped_logged = 0

    @classmethod
    def attach(cls, caches: Caches) -> EngineState:
        """An EngineState fed by `caches`' events from now on (call before they start)."""
        engine = cls(caches)
        for name in ENGINE_CACHES:
            cache: WatchCache = getattr(caches, name)
            # The engine first: a key the event enqueues is then decided on a state that has it.
            cache.on_event = chained(engine._event_handler(name), cache.on_event)
        return engine

    def _event_handler(self, name: str) -> OnEvent:
        return lambda event_type, obj: self.on_event(name, event_type, obj)

    def on_event(self, cache: str, event_type: str, obj: Obj) -> None:
        with self._lock:
            if self._live is None:
                return  # not seeded yet: seeding will read the cache
            try:
                self._live.apply(cache, event_type, obj)
            except Exception:
                # Malformed objects are skipped inside; anything else is a bug that must not
                # stop the watch: start again from the caches on the next decision.
                log.exception("live preemption state dropped; reseeding from the caches", cache=cache)
                self._live = None

    def _seeded(self) -> LiveClusterState:
        if self._live is None:
            self._live = LiveClusterState(
                nodes=self.caches.nodes.items(),
                pods=self.caches.pods.items(),
                podgroups=self.caches.podgroups.items(),
                pdbs=self.caches.pdbs.items(),
                priority_classes=self.caches.classes.items(),
            )
        return self._live

    def decide(self, group_key: str, *, policy: PreemptionPolicy = DEFAULT_POLICY) -> Outcome:
        """engine.decide_group on the current state (what decide_for_group gives on a fresh
        snapshot of the caches, without building one)."""
        with self._lock:
            live = self._seeded()
            if len(live.skipped) != self._skipped_logged:
                self._skipped_logged = len(live.skipped)
                log.warning("malformed objects left out of the preemption state", skipped=dict(live.skipped))
            return decide_group(live.current(), group_key, policy=policy)

    def decide_pod(
        self, pod_key: str, *, policy: PreemptionPolicy = DEFAULT_POLICY, now: float | None = None
    ) -> Outcome:
        """engine.decide_pod on the current state: the single-pod decision `python -m
        controller simulate` takes for that pod on a snapshot of the same objects. `now`
        (epoch seconds) is the caller's clock, for --preemption-start-delay."""
        with self._lock:
            return decide_pod(self._seeded().current(), pod_key, policy=policy, now=now)

    def read(self, fn: Callable[[ClusterState], T]) -> T:
        """`fn` of the current state, under the lock (the preempt extender's reads)."""
        with self._lock:
            return fn(self._seeded().current())

    def order(self, pod_keys: Iterable[str]) -> list[str]:
        """`pod_keys` in the engine's preemptor order (engine.Preemptor.order: priority as the
        engine resolves it, highest first, then creation time, then key); keys the state does
        not hold are left out."""
        with self._lock:
            pods = self._seeded().current().pods
            known = [pods[k] for k in pod_keys if k in pods]
        return [p.key for p in sorted(known, key=lambda p: (-p.priority, p.created, p.key))]
