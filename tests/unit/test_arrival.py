"""An admission's deadline counts from when its request arrived, not from when a thread took it
(webhook/arrival.py): kube-apiserver's timeout for the call was running all along."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest

from tests.builders import pod, review
from tests.slow_rule_server import probe_rule_set
from webhook.arrival import arrived_at, mark_arrival
from webhook.endpoints import AdmissionEndpoints
from webhook.review import AdmissionRequest, Decision, allow
from webhook.view import CacheView


@pytest.fixture(autouse=True)
def _no_mark():
    mark_arrival(None)
    yield
    mark_arrival(None)


@pytest.mark.parametrize(
    ("ago", "expected_ago"),
    [
        (None, 0.0),  # not marked: the thread read the request itself, so now
        (3.0, 3.0),  # waited 3 s for a thread
        (-5.0, 0.0),  # a mark in the future is never believed: now
    ],
)
def test_the_arrival_is_the_mark_or_now(ago: float | None, expected_ago: float) -> None:
    now = time.monotonic()
    mark_arrival(None if ago is None else now - ago)
    assert arrived_at() == pytest.approx(now - expected_ago, abs=0.05)


def test_a_mark_is_per_thread() -> None:
    mark_arrival(time.monotonic() - 60)
    seen: list[float] = []
    other = threading.Thread(target=lambda: seen.append(arrived_at()))
    other.start()
    other.join()
    assert seen[0] == pytest.approx(time.monotonic(), abs=0.5)


def _review(timeout_query: str, queued_seconds: float | None) -> AdmissionRequest:
    deadlines: list[AdmissionRequest] = []

    def handler(request: AdmissionRequest, _view: Any) -> Decision:
        deadlines.append(request)
        return allow()

    endpoints = AdmissionEndpoints([probe_rule_set(handler)], CacheView({}), fallback=lambda e, s: [])
    body = json.dumps(review(pod("p", namespace="team"))).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/validate/slow",
        "QUERY_STRING": timeout_query,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    if queued_seconds is not None:
        mark_arrival(time.monotonic() - queued_seconds)
    status, _headers, _answer = endpoints.serve(environ, *endpoints.by_path["/validate/slow"])
    assert status.startswith("200"), status
    return deadlines[0]


@pytest.mark.parametrize("queued", [0.0, 2.0, 4.5])
def test_time_queued_for_a_thread_is_taken_off_the_deadline(queued: float) -> None:
    request = _review("timeout=5s", queued)
    assert request.deadline is not None
    assert request.deadline - time.monotonic() == pytest.approx(5.0 - queued, abs=0.2)


def test_no_timeout_no_deadline() -> None:
    assert _review("", 2.0).deadline is None
