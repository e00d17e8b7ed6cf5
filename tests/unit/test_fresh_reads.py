"""priogate.kube.fresh_reads: a result is only ever from a read that started after `since`, and
requests that arrive while a read is in flight share the next one."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

import pytest

from priogate.kube.fresh_reads import FreshReads


class GatedRead:
    """A read that returns its call number, each call held until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.started: list[float] = []
        self.release = threading.Semaphore(0)
        self.fail: Exception | None = None

    def __call__(self, key: Hashable) -> int:
        self.calls += 1
        self.started.append(time.monotonic())
        number = self.calls
        assert self.release.acquire(timeout=5), "read never released"
        if self.fail is not None:
            raise self.fail
        return number


def _in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def _until(condition, timeout: float = 5.0) -> None:
    stop = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < stop, "condition never held"
        time.sleep(0.001)


def test_a_finished_read_serves_requests_that_arrived_before_it_started() -> None:
    read = GatedRead()
    reads: FreshReads[int] = FreshReads(read)
    since = time.monotonic()
    read.release.release()
    assert reads.get("ns", since, timeout=5) == 1
    assert reads.get("ns", since, timeout=5) == 1  # no second read
    assert read.calls == 1


def test_a_read_in_flight_that_started_before_the_request_is_not_used() -> None:
    read = GatedRead()
    reads: FreshReads[int] = FreshReads(read)
    reads.want("ns", time.monotonic())
    _until(lambda: read.calls == 1)
    arrived = time.monotonic()  # after the first read started
    thread, out = _in_thread(lambda: reads.get("ns", arrived, timeout=5))
    read.release.release()  # the first read ends: too old for this request
    _until(lambda: read.calls == 2)
    assert read.started[1] >= arrived
    assert not out
    read.release.release()
    thread.join(5)
    assert out == [2]


def test_requests_arriving_during_a_read_share_the_next_one() -> None:
    read = GatedRead()
    reads: FreshReads[int] = FreshReads(read)
    reads.want("ns", time.monotonic())
    _until(lambda: read.calls == 1)
    waiters = [_in_thread(lambda: reads.get("ns", time.monotonic(), timeout=5)) for _ in range(8)]
    read.release.release()
    _until(lambda: read.calls == 2)
    read.release.release()
    for thread, _ in waiters:
        thread.join(5)
    assert [out for _, out in waiters] == [[2]] * 8
    assert read.calls == 2


def test_keys_are_read_apart() -> None:
    read = GatedRead()
    reads: FreshReads[int] = FreshReads(read)
    since = time.monotonic()
    read.release.release()
    read.release.release()
    assert reads.get("a", since, timeout=5) == 1
    assert reads.get("b", since, timeout=5) == 2


def test_an_error_reaches_every_waiter_and_the_next_request_reads_again() -> None:
    read = GatedRead()
    read.fail = RuntimeError("apiserver down")
    reads: FreshReads[int] = FreshReads(read)
    since = time.monotonic()
    read.release.release()
    with pytest.raises(RuntimeError, match="apiserver down"):
        reads.get("ns", since, timeout=5)
    read.fail = None
    read.release.release()
    assert reads.get("ns", time.monotonic(), timeout=5) == 2


def test_no_read_in_time_is_a_timeout() -> None:
    read = GatedRead()
    reads: FreshReads[int] = FreshReads(read)
    with pytest.raises(TimeoutError):
        reads.get("ns", time.monotonic(), timeout=0.05)
    read.release.release()  # let the background read end
