"""A watch-backed cache of one resource type: the webhook's and controller's only view of it.

LIST, then WATCH from the list's resourceVersion with bookmarks; relist on 410 Gone; reconnect
with jittered exponential backoff; a client-side read timeout so a silently dead connection is
noticed. Readers never block and never call the API server: objects live in per-namespace dicts
that are replaced, not mutated (copy-on-write), so a reader's view is always consistent.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import structlog

from priogate.kube.client import ApiClient, ApiError

log = structlog.get_logger("priogate.cache")

Obj = Mapping[str, Any]
EMPTY: Mapping[str, Obj] = MappingProxyType({})
# What a cache keeps of each object, or None to keep nothing (client-go's SetTransform).
Transform = Callable[[Obj], Obj | None]
# (event type, object as the server sent it): "ADDED", "MODIFIED", "DELETED", or "SYNC" for
# every object of a relist (client-go's ResourceEventHandler, with resync as "SYNC").
OnEvent = Callable[[str, Obj], None]


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
        self._by_namespace: dict[str, Mapping[str, Obj]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.resource_version = ""
        self.generation = 0  # bumps on every change; derived values key their memo on it
        self._namespace_generation: dict[str, int] = {}
        self._missing_logged = False
        self.missing_resource_retry_seconds = 10.0
        self._relist_generation = 0

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
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def namespace(self, namespace: str) -> Mapping[str, Obj]:
        return self._by_namespace.get(namespace, EMPTY)

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
        self._synced.set()
        if self.on_event is not None:
            seen = {_key(obj) for obj in listed}
            for obj in before:  # deleted while the watch was down: a relist is the only news of it
                if _key(obj) not in seen:
                    self.on_event("DELETED", obj)
            for obj in listed:
                self.on_event("SYNC", obj)

    def apply_event(self, event_type: str, obj: Obj) -> None:
        meta = obj.get("metadata", {})
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
            objs = dict(self._by_namespace.get(namespace, EMPTY))
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
        # The read timeout catches a connection that died without a FIN.
        for line in self.client.stream_lines(self.path, query=query, timeout=(5, server_timeout + 30)):
            if self._stop.is_set():
                return
            event = json.loads(line)
            obj = event.get("object") or {}
            if event.get("type") == "ERROR":
                if obj.get("code") == 410:
                    raise Gone(obj.get("message", "resourceVersion too old"))
                raise ApiError(obj.get("code", 0), obj.get("reason", ""), obj.get("message", ""))
            self.apply_event(event["type"], obj)

    def _run(self) -> None:
        backoff = 0.5
        need_list = True
        while not self._stop.is_set():
            connected_at = time.monotonic()
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self._watch()
                backoff = 0.5
                continue
            except Gone as e:
                log.info("watch expired, relisting", cache=self.name, reason=str(e))
                need_list = True
                continue
            except ApiError as e:
                if e.status == 404 and need_list:
                    # The resource type is not served (its CRD is not installed): no object of it
                    # can exist, so the cache is truly empty. Look again later for the CRD.
                    if not self._missing_logged:
                        log.warning("resource not served; treating as empty", cache=self.name, path=self.path)
                        self._missing_logged = True
                    if not self.synced or self.items():
                        self.replace_all([], "")
                    self._stop.wait(self.missing_resource_retry_seconds)
                    continue
                need_list = need_list or e.status == 410
                error = str(e)
            except Exception as e:  # network errors, timeouts, malformed stream: reconnect
                error = repr(e)
            # A watch that ran a while was healthy: start the backoff afresh (an apiserver restart
            # must not leave every cache waiting 30 s).
            if time.monotonic() - connected_at > 10:
                backoff = 0.5
            log.warning(
                "watch interrupted, reconnecting", cache=self.name, error=error, retry_in=round(backoff, 2)
            )
            self._stop.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, 30.0)


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")
