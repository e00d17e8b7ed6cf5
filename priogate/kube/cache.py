"""A watch-backed cache of one resource type: the webhook's and controller's only view of it.

LIST, then WATCH from the list's resourceVersion with bookmarks; relist on 410 Gone; reconnect
with jittered exponential backoff; a client-side read timeout so a silently dead connection is
noticed. Readers never block and never call the API server: objects live in per-namespace dicts
that are replaced, not mutated (copy-on-write), so a reader's view is always consistent.

A cache never lies about what it knows. Until its first LIST succeeds it is not synced; after
that, any failed LIST or WATCH (a 404 too: right after an API server restart a CRD's resource is
not served for a moment, which says nothing about whether its objects exist) and a watch that
heard nothing, not even a bookmark, for `quiet_seconds` make it stale: it keeps the last good
contents, `synced` is False, and readers decide whether stale contents are good enough for
them. The next successful LIST, or WATCH opened from the cache's resourceVersion, makes it fresh
again. client-go's reflector (k8s.io/client-go tools/cache/reflector.go) likewise keeps its
store across failed ListAndWatch attempts and relists only on an expired resourceVersion.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import structlog

from priogate import api_json
from priogate.kube.client import ApiClient, ApiError

log = structlog.get_logger("priogate.cache")

Obj = Mapping[str, Any]
EMPTY: Mapping[str, Obj] = MappingProxyType({})
# What a cache keeps of each object, or None to keep nothing (client-go's SetTransform).
Transform = Callable[[Obj], Obj | None]
# (event type, object as the server sent it): "ADDED", "MODIFIED", "DELETED", or "SYNC" for
# every object of a relist (client-go's ResourceEventHandler, with resync as "SYNC").
OnEvent = Callable[[str, Obj], None]


def chained(first: OnEvent, then: OnEvent | None) -> OnEvent:
    """An event handler that calls `first`, then `then` (a cache's handler already set)."""
    if then is None:
        return first

    def both(event_type: str, obj: Obj) -> None:
        first(event_type, obj)
        then(event_type, obj)

    return both


# With allowWatchBookmarks=true kube-apiserver's watch cache sends a BOOKMARK about once a minute
# even when nothing changes (KEP-956 "Watch bookmark"; k8s.io/apiserver pkg/storage/cacher,
# bookmarkFrequency), so a watch silent for twice that long is dead, whatever TCP says. The bound
# is the watch's read timeout: a healthy watch is never restarted by it.
DEFAULT_QUIET_SECONDS = 120.0
# How often the last-event time is reported to on_state while events flow (metrics writes are
# not free; transitions are always reported at once).
_REPORT_EVERY_SECONDS = 5.0


@dataclass(frozen=True)
class CacheState:
    """What readiness and metrics report of a cache."""

    name: str
    synced: bool  # listed, and its watch is not known to be broken: the contents are current
    stale: bool  # listed once, but not current now (a failed LIST or WATCH, or a quiet watch)
    last_event: float  # Unix time of the last LIST, event or bookmark; 0 before any
    reason: str  # why it is stale or not synced; "" when synced


class Gone(Exception):
    """The watch's resourceVersion is too old: relist."""


class WatchCache:
    def __init__(
        self,
        client: ApiClient,
        path: str,
        name: str,
        *,
        watch_timeout_seconds: int = 240,
        quiet_seconds: float = DEFAULT_QUIET_SECONDS,
        selectors: Sequence[tuple[str, str]] = (),
        transform: Transform | None = None,
        on_event: OnEvent | None = None,
    ) -> None:
        self.client = client
        # A cache of every pod in a cluster holds only what its readers use.
        self.transform = transform
        # Per changed object, after the cache holds the change: the controller turns each into
        # work (a pod event enqueues its PodGroup).
        self.on_event = on_event
        self.path = path
        self.selectors = list(selectors)  # e.g. ("fieldSelector", "status.phase!=Succeeded")
        self.name = name
        self.watch_timeout_seconds = watch_timeout_seconds
        self.quiet_seconds = quiet_seconds
        # Called (from the watch thread) when the cache's state changes, and now and then with
        # the last-event time: metrics follow it.
        self.on_state: Callable[[CacheState], None] | None = None
        self._by_namespace: dict[str, MappingProxyType[str, Obj]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified whenever `generation` bumps
        self._listed = threading.Event()  # a LIST succeeded once: the contents mean something
        self._synced = threading.Event()  # listed, and current (not stale)
        self._reason = "not listed yet"
        self._stale_since = 0.0  # time.monotonic() when it went stale
        self._last_heard = time.monotonic()  # last LIST, event or bookmark (or watch opened)
        self._last_event = 0.0  # the same, Unix time
        self._reported = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.generation = 0  # bumps on every change; derived values key their memo on it
        self._namespace_generation: dict[str, int] = {}
        self._missing_logged = False
        self._relist_generation = 0
        # Reconnect backoff (seconds): jittered, doubling from the first to the cap.
        self.backoff_first = 0.5
        self.backoff_max = 30.0
        self._opened = False  # a watch opened since the last failure

    @classmethod
    def static(cls, name: str, objects: list[Obj] | None) -> WatchCache:
        """A cache that never talks to a server, holding `objects` (None: never synced).
        For benchmarks, offline policy checks and tests."""
        cache = cls(client=None, path="", name=name)  # type: ignore[arg-type]
        if objects is not None:
            cache.replace_all(objects, "0")
        return cache

    # ---- reading -----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Listed, and current: no failed LIST or WATCH and no quiet watch since."""
        return self._synced.is_set()

    @property
    def listed(self) -> bool:
        """A LIST succeeded once: the contents are the last good ones, current or stale."""
        return self._listed.is_set()

    @property
    def stale(self) -> bool:
        """Listed once, but not current now: the contents may be behind the API server."""
        return self._listed.is_set() and not self._synced.is_set()

    def wait_changed(self, generation: int, timeout: float) -> None:
        """Return once `generation` has moved on from the one given, or after `timeout` s."""
        with self._changed:
            if self.generation == generation and timeout > 0:
                self._changed.wait(timeout)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def wait_listed(self, timeout: float) -> bool:
        return self._listed.wait(timeout)

    def state(self) -> CacheState:
        synced = self.synced
        return CacheState(self.name, synced, self.stale, self._last_event, "" if synced else self._reason)

    def stale_seconds(self) -> float:
        return time.monotonic() - self._stale_since if self.stale else 0.0

    def namespace(self, namespace: str) -> Mapping[str, Obj]:
        return self._by_namespace.get(namespace, EMPTY)

    def namespaces(self) -> list[str]:
        """The namespaces holding objects. namespace(ns) is a read-only snapshot, replaced (a new
        object) on every change in ns: a value derived from it stays valid while it is the same."""
        return list(self._by_namespace)

    def namespace_generation(self, namespace: str) -> int:
        """Changes whenever an object of `namespace` changes (or the cache is relisted)."""
        return max(self._namespace_generation.get(namespace, 0), self._relist_generation)

    def get(self, namespace: str, name: str) -> Obj | None:
        return self._by_namespace.get(namespace, EMPTY).get(name)

    def items(self) -> list[Obj]:
        return [obj for objs in list(self._by_namespace.values()) for obj in objs.values()]

    # ---- writing (the watch thread, or tests feeding events) ---------------------------

    def replace_all(self, objects: list[Obj], resource_version: str) -> None:
        listed = objects
        before = self.items() if self.on_event is not None else []
        if self.transform is not None:
            objects = [kept for kept in map(self.transform, objects) if kept is not None]
        grouped: dict[str, dict[str, Obj]] = {}
        for obj in objects:
            meta = obj["metadata"]
            grouped.setdefault(meta.get("namespace", ""), {})[meta["name"]] = obj
        with self._lock:
            self._by_namespace = {ns: MappingProxyType(objs) for ns, objs in grouped.items()}
            self.resource_version = resource_version
            self.generation += 1
            self._relist_generation = self.generation
            self._changed.notify_all()
        self._listed.set()
        self._heard()
        self._mark_synced()
        if self.on_event is not None:
            seen = {_key(obj) for obj in listed}
            for obj in before:  # deleted while the watch was down: a relist is the only news of it
                if _key(obj) not in seen:
                    self.on_event("DELETED", obj)
            for obj in listed:
                self.on_event("SYNC", obj)

    def apply_event(self, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
        self._heard()
        if event_type == "BOOKMARK":
            self.resource_version = meta.get("resourceVersion", self.resource_version)
            return
        self._store(event_type, obj)
        if self.on_event is not None:
            self.on_event(event_type, obj)

    def _store(self, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta["name"]
        if self.transform is not None and event_type != "DELETED":
            kept = self.transform(obj)
            if kept is None:  # not (or no longer) of interest: like a deletion
                event_type = "DELETED"
            else:
                obj = kept
        with self._lock:
            if event_type == "DELETED" and name not in self._by_namespace.get(namespace, EMPTY):
                # Nothing stored changes, so derived values keyed on the generation stay valid.
                self.resource_version = meta.get("resourceVersion", self.resource_version)
                return
            current = self._by_namespace.get(namespace)
            # mappingproxy.copy() copies the dict beneath at C speed; dict(proxy) goes key by key
            # through the mapping protocol, 20 times slower: at a few hundred objects in a
            # namespace that copy was a quarter of a quota worker's time under load.
            objs = current.copy() if current is not None else {}
            if event_type == "DELETED":
                objs.pop(name, None)
            else:
                objs[name] = obj
            if objs:
                self._by_namespace[namespace] = MappingProxyType(objs)
            else:
                self._by_namespace.pop(namespace, None)
            self.resource_version = meta.get("resourceVersion", self.resource_version)
            self.generation += 1
            self._namespace_generation[namespace] = self.generation
            self._changed.notify_all()

    # ---- freshness ---------------------------------------------------------------------

    def _heard(self) -> None:
        self._last_heard = time.monotonic()
        self._last_event = time.time()
        if self._last_heard - self._reported >= _REPORT_EVERY_SECONDS:
            self._report()

    def _report(self) -> None:
        self._reported = time.monotonic()
        if self.on_state is not None:
            try:
                self.on_state(self.state())
            except Exception:  # metrics must never stop the watch
                log.exception("cache state callback failed", cache=self.name)

    def _mark_synced(self) -> None:
        if self._synced.is_set() or not self._listed.is_set():
            return
        if self._stale_since:
            log.info(
                "cache current again",
                cache=self.name,
                stale_seconds=round(time.monotonic() - self._stale_since, 1),
            )
        self._reason = ""
        self._synced.set()
        self._report()

    def mark_stale(self, reason: str) -> None:
        """The contents may be behind the server: keep them, but say so."""
        self._reason = reason
        if not self._synced.is_set():
            return
        self._synced.clear()
        self._stale_since = time.monotonic()
        log.warning(
            "cache stale; keeping its last contents until a list or watch succeeds",
            cache=self.name,
            reason=reason,
        )
        self._report()

    # ---- the list/watch loop -----------------------------------------------------------

    def start(self) -> WatchCache:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _relist(self) -> None:
        items: list[Obj] = []
        continue_token = ""
        while True:
            query = [*self.selectors, ("limit", "500")] + (
                [("continue", continue_token)] if continue_token else []
            )
            page = self.client.get(self.path, query=query, timeout=(5, 60))
            items.extend(page.get("items") or [])
            meta = page.get("metadata", {})
            continue_token = meta.get("continue", "")
            if not continue_token:
                break
        self.replace_all(items, meta.get("resourceVersion", ""))
        log.info("cache listed", cache=self.name, objects=len(items), resource_version=self.resource_version)

    def _watch(self) -> None:
        server_timeout = self.watch_timeout_seconds + random.randint(0, 30)
        query = [
            *self.selectors,
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version),
            ("timeoutSeconds", str(server_timeout)),
        ]
        # The read timeout is the quiet bound: bookmarks arrive well within it on a live watch, so
        # a read that times out means a connection that died without a FIN (or a server that
        # stopped sending), noticed within quiet_seconds rather than at the watch's end.
        lines = self.client.stream_lines(
            self.path, query=query, timeout=(5, self.quiet_seconds), on_open=self._watch_opened
        )
        for line in lines:
            if self._stop.is_set():
                return
            event = api_json.loads(line)
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                if obj.get("code") == 410:
                    raise Gone(obj.get("message", "resourceVersion too old"))
                raise ApiError(obj.get("code", 0), obj.get("reason", ""), obj.get("message", ""))
            self.apply_event(event["type"], obj)

    def _watch_opened(self) -> None:
        # A watch from the cache's resourceVersion delivers every change since: nothing is missed,
        # so the cache is current again (an expired version would have failed with 410 instead).
        self._opened = True
        self._heard()
        self._mark_synced()

    def _run(self) -> None:
        backoff = self.backoff_first
        need_list = True
        while not self._stop.is_set():
            connected_at = time.monotonic()
            try:
                if need_list:
                    self._relist()
                    need_list = False
                    self._missing_logged = False
                self._watch()
                backoff = self.backoff_first
                continue
            except Gone as e:
                log.info("watch expired, relisting", cache=self.name, reason=str(e))
                self.mark_stale(f"watch expired, relisting: {e}")
                need_list = True
                continue
            except ApiError as e:
                if e.status == 404 and not self._missing_logged:
                    # Not served: its CRD is not installed, or not served again yet after an API
                    # server restart. Either way nothing is known of its objects: stay stale (or
                    # not synced), never "empty", and keep asking.
                    log.warning(
                        "resource not served (is its CRD installed?)", cache=self.name, path=self.path
                    )
                    self._missing_logged = True
                need_list = need_list or e.status == 410
                error = str(e)
            except Exception as e:  # network errors, timeouts, malformed stream: reconnect
                error = repr(e)
                quiet = time.monotonic() - self._last_heard
                if not need_list and quiet >= self.quiet_seconds:
                    error = f"no event or bookmark for {quiet:.1f} s ({error})"
            self.mark_stale(f"{'list' if need_list else 'watch'} failed: {error}")
            # A watch that opened, or ran a while, reached a working server: start the backoff
            # afresh (after an apiserver restart, or a quiet watch, no cache may wait 30 s).
            if self._opened or time.monotonic() - connected_at > 10:
                backoff = self.backoff_first
            self._opened = False
            log.warning(
                "watch interrupted, reconnecting", cache=self.name, error=error, retry_in=round(backoff, 2)
            )
            self._stop.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, self.backoff_max)


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")
