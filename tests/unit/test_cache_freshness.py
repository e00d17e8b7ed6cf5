"""A WatchCache never lies: a failed LIST (404 included) or a watch that hears nothing for longer
than the quiet bound leaves it stale, with its last good contents, never empty and synced; the
next successful LIST or WATCH makes it current again. The cache's own list/watch loop runs
against an in-memory server that answers like kube-apiserver (and, like urllib3, raises when a
read waits longer than the read timeout)."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError

PATH = "/apis/scheduling.volcano.sh/v1beta1/podgroups"


def group(name: str, rv: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": str(rv)}
    }


class FakeServer:
    """LIST answers `objects`; each WATCH opens (or fails with `watch_error`) and then yields
    what is put on `events` (None ends it like a server-side timeout)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.rv = 10
        self.list_error: Exception | None = None
        self.watch_error: Exception | None = None
        self.lists = 0
        self.watches: list[Sequence[tuple[str, str]]] = []
        self.watch_times: list[float] = []
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.lock = threading.Lock()

    def get(self, path: str, *, query: Sequence[tuple[str, str]] = (), timeout: Any = None) -> dict[str, Any]:
        with self.lock:
            self.lists += 1
            if self.list_error is not None:
                raise self.list_error
            return {"items": list(self.objects), "metadata": {"resourceVersion": str(self.rv)}}

    def stream_lines(
        self,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        timeout: Any = None,
        on_open: Callable[[], None] | None = None,
    ) -> Iterator[bytes]:
        with self.lock:
            self.watches.append(query)
            self.watch_times.append(time.monotonic())
            error = self.watch_error
        if error is not None:
            raise error
        if on_open is not None:
            on_open()
        read_timeout = timeout[1] if isinstance(timeout, tuple) else timeout
        while True:
            try:
                event = self.events.get(timeout=read_timeout)
            except queue.Empty:
                raise TimeoutError(f"read timed out ({read_timeout} s)") from None
            if event is None:
                return
            yield json.dumps(event).encode()


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def server() -> FakeServer:
    return FakeServer([group("live", 5)])


def started(server: FakeServer, quiet_seconds: float = 30.0) -> WatchCache:
    cache = WatchCache(server, PATH, "podgroups")  # type: ignore[arg-type]
    # Set as flags would be; the loop reads them when it runs.
    cache.quiet_seconds = quiet_seconds
    cache.backoff_first = 0.01
    cache.backoff_max = 0.05
    return cache.start()


def test_relist_404_after_a_good_sync_is_stale_and_keeps_the_contents(server: FakeServer) -> None:
    cache = started(server)
    try:
        assert cache.wait_synced(5)
        assert [g["metadata"]["name"] for g in cache.items()] == ["live"]
        # kube-apiserver restarted: the watch's version is gone and the CRD is not served yet.
        server.list_error = ApiError(404, "NotFound", "the server could not find the requested resource")
        server.events.put({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}})
        eventually(lambda: server.lists >= 2)
        time.sleep(0.2)  # several failed relists

        assert not cache.synced
        assert [g["metadata"]["name"] for g in cache.items()] == ["live"], "a failed relist emptied the cache"
        state = cache.state()
        assert state.stale and not state.synced
        assert "404" in state.reason
    finally:
        cache.stop()
        server.events.put(None)


def test_first_list_404_is_not_synced_rather_than_empty(server: FakeServer) -> None:
    server.list_error = ApiError(404, "NotFound", "the server could not find the requested resource")
    cache = started(server)
    try:
        eventually(lambda: server.lists >= 1)
        time.sleep(0.1)  # the failed LIST has been handled
        assert not cache.synced, "a 404 made an empty cache that says it is synced"
        assert cache.items() == []
        eventually(lambda: server.lists >= 3)  # and it keeps asking
        assert not cache.synced
        assert not cache.wait_synced(0.1)
        assert not cache.state().synced
    finally:
        cache.stop()


def test_quiet_watch_is_restarted_and_stale_until_a_watch_opens(server: FakeServer) -> None:
    cache = started(server, quiet_seconds=0.3)
    try:
        assert cache.wait_synced(5)
        eventually(lambda: len(server.watches) == 1)
        # The connection dies without a FIN: the server sends nothing, not even bookmarks, and
        # new connections fail until it is back.
        server.watch_error = ConnectionRefusedError("connection refused")
        eventually(lambda: len(server.watches) >= 2, timeout=3)
        eventually(lambda: not cache.synced, timeout=1)
        state = cache.state()
        assert state.stale
        assert [g["metadata"]["name"] for g in cache.items()] == ["live"]

        server.watch_error = None  # back: the watch reopens from the cache's resourceVersion
        assert cache.wait_synced(5)
        assert not cache.stale
        assert server.lists == 1, "a reopened watch needs no relist"
        assert ("resourceVersion", "10") in server.watches[-1]
    finally:
        cache.stop()
        server.events.put(None)


def test_quiet_watch_reports_why(server: FakeServer) -> None:
    cache = started(server, quiet_seconds=0.2)
    states = []
    cache.on_state = states.append
    try:
        assert cache.wait_synced(5)
        eventually(lambda: len(server.watches) == 1)
        server.watch_error = ConnectionRefusedError("connection refused")
        eventually(lambda: any(s.stale for s in states), timeout=3)
        stale = next(s for s in states if s.stale)
        assert "no event or bookmark" in stale.reason
        assert stale.last_event > 0
    finally:
        cache.stop()


def test_relist_recovers_to_fresh_contents(server: FakeServer) -> None:
    cache = started(server)
    try:
        assert cache.wait_synced(5)
        server.list_error = ApiError(404, "NotFound", "not found")
        server.events.put({"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}})
        eventually(lambda: cache.stale)
        with server.lock:
            server.objects = [group("live", 5), group("new", 11)]
            server.rv = 12
            server.list_error = None
        assert cache.wait_synced(5)
        assert not cache.stale and cache.state().reason == ""
        assert sorted(g["metadata"]["name"] for g in cache.items()) == ["live", "new"]
    finally:
        cache.stop()
        server.events.put(None)


def test_events_and_bookmarks_keep_a_watch_current(server: FakeServer) -> None:
    cache = started(server, quiet_seconds=0.5)
    try:
        assert cache.wait_synced(5)
        for rv in range(11, 20):
            server.events.put({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(rv)}}})
            time.sleep(0.1)
        assert cache.synced
        assert len(server.watches) == 1
        assert cache.resource_version == "19"
    finally:
        cache.stop()
        server.events.put(None)


def test_a_watch_the_server_ends_cleanly_stays_current(server: FakeServer) -> None:
    cache = started(server)
    seen = []
    cache.on_state = seen.append
    try:
        assert cache.wait_synced(5)
        server.events.put(None)  # timeoutSeconds reached: the watch ends, and is opened again
        eventually(lambda: len(server.watches) >= 2)
        assert cache.synced
        assert not any(s.stale for s in seen)
    finally:
        cache.stop()
        server.events.put(None)


def test_a_watch_that_opens_resets_the_backoff(server: FakeServer) -> None:
    """Quiet restarts of watches that open again at once do not pile up backoff: the cache is
    stale only for a reconnect each time, never for the backoff's cap."""
    cache = WatchCache(server, PATH, "podgroups")  # type: ignore[arg-type]
    cache.quiet_seconds = 0.2
    cache.backoff_first = 0.1
    cache.backoff_max = 30.0
    cache.start()
    try:
        eventually(lambda: len(server.watch_times) >= 6, timeout=5)
        gaps = [b - a for a, b in zip(server.watch_times, server.watch_times[1:], strict=False)]
        # quiet bound + first backoff (jittered by at most 20 %), whatever came before
        assert max(gaps) < 0.2 + 0.1 * 1.2 + 0.45, (
            gaps
        )  # margin for a loaded machine; without the reset the gaps double
    finally:
        cache.stop()


def test_a_wait_for_a_change_ends_with_the_change_or_its_timeout() -> None:
    cache = WatchCache.static("ledgers", [])
    generation = cache.generation
    started = time.monotonic()
    cache.wait_changed(generation, 0.05)  # nothing changes
    assert time.monotonic() - started >= 0.05
    obj = {"metadata": {"name": "r", "namespace": "priogate-system", "resourceVersion": "2"}}
    timer = threading.Timer(0.01, cache.apply_event, ("ADDED", obj))
    timer.start()
    started = time.monotonic()
    cache.wait_changed(generation, 5.0)
    assert time.monotonic() - started < 1.0
    assert cache.get("priogate-system", "r") == obj
    started = time.monotonic()
    cache.wait_changed(generation, 5.0)  # already moved on: no wait at all
    assert time.monotonic() - started < 0.5
    timer.join()
