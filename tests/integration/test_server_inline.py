"""The real server answering admissions on its event loop (webhook/inline.py): the same answer as
a thread's, a body that comes in pieces, a body that stalls, pipelined requests."""

from __future__ import annotations

import json
import re
import socket
import ssl
import time
from collections.abc import Iterator

import pytest

from tests.builders import SYSTEM_CLASSES, pod, priority_class, review
from tests.integration.test_server_edge import still_open
from tests.serving import RunningServer, start_server
from webhook.inline import INLINE_BODY_BYTES

CLASSES = [*SYSTEM_CLASSES, priority_class("high", value=1000)]
DEADLINE = 3.0


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    srv = start_server(
        tmp_path_factory.mktemp("inline"), CLASSES, workers=1, client_deadline_seconds=DEADLINE
    )
    yield srv
    assert srv.stop() == 0


def connect(server: RunningServer) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return server.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1")


def head(path: str, body: bytes, *, chunked: bool = False, content_type: str = "application/json") -> bytes:
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode()


def chunked(body: bytes) -> bytes:
    half = len(body) // 2
    return (
        b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:])) + b"0\r\n\r\n"
    )


def read_response(tls: ssl.SSLSocket, buffered: bytearray) -> bytes:
    """One response (framed by Content-Length), taken from `buffered` and the socket."""
    while b"\r\n\r\n" not in buffered:
        data = tls.recv(65536)
        assert data, f"closed before a response: {bytes(buffered)!r}"
        buffered += data
    end = buffered.index(b"\r\n\r\n") + 4
    length = int(re.search(rb"\r\nContent-Length: (\d+)\r\n", bytes(buffered[:end]), re.I).group(1))
    while len(buffered) < end + length:
        buffered += tls.recv(65536)
    response = bytes(buffered[: end + length])
    del buffered[: end + length]
    return response


def exchange(server: RunningServer, *parts: bytes, pause: float = 0.0) -> bytes:
    with connect(server) as tls:
        for part in parts:
            tls.sendall(part)
            time.sleep(pause)
        return read_response(tls, bytearray())


def undated(response: bytes) -> bytes:
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", response)


BODY = json.dumps(review(pod(namespace="team-a", priority_class="high"))).encode()


@pytest.mark.parametrize(
    ("path", "body", "content_type"),
    [
        ("/mutate/pods", BODY, "application/json"),  # allowed, with a patch
        ("/mutate/pods", b'{"kind": "AdmissionReview"', "application/json"),  # not JSON: 400
        ("/mutate/pods", BODY, "text/plain"),  # not JSON either: 400
        ("/validate/priorityclasses", BODY, "application/json"),  # a pod sent to the wrong hook
    ],
)
def test_an_inline_answer_is_the_answer_a_thread_gives(server, path, body, content_type):
    """A Content-Length body is answered on the loop; a chunked one (which the loop leaves to a
    thread) gets the same bytes but for the Date header."""
    inline = exchange(server, head(path, body, content_type=content_type) + body)
    threaded = exchange(server, head(path, body, chunked=True, content_type=content_type) + chunked(body))
    assert undated(inline) == undated(threaded)
    assert inline.startswith(
        b"HTTP/1.1 200" if content_type == "application/json" and body == BODY else b"HTTP/1.1 4"
    )


def test_a_body_in_pieces_is_waited_for(server):
    third = len(BODY) // 3
    response = exchange(
        server,
        head("/mutate/pods", BODY),
        BODY[:third],
        BODY[third : 2 * third],
        BODY[2 * third :],
        pause=0.2,
    )
    assert response.startswith(b"HTTP/1.1 200")
    answer = json.loads(response.split(b"\r\n\r\n", 1)[1])["response"]
    assert answer["uid"] == json.loads(BODY)["request"]["uid"]
    assert answer["allowed"] is True


def test_a_stalled_body_is_closed_at_its_deadline_and_holds_up_nobody(server):
    staller = connect(server)
    try:
        staller.sendall(head("/mutate/pods", BODY) + BODY[:100])
        sent = time.monotonic()
        for _ in range(3):  # meanwhile others are answered at once
            started = time.monotonic()
            assert exchange(server, head("/mutate/pods", BODY) + BODY).startswith(b"HTTP/1.1 200")
            assert time.monotonic() - started < 1.0
        assert still_open([staller], sent + DEADLINE + 2.0) == []
        assert time.monotonic() - sent >= DEADLINE - 0.5, "the body got the whole deadline"
    finally:
        staller.close()


def test_pipelined_requests_are_answered_in_order(server):
    other = json.dumps(review(pod(namespace="team-b", priority_class="high"))).encode()
    with connect(server) as tls:
        tls.sendall(head("/mutate/pods", BODY) + BODY + head("/mutate/pods", other) + other)
        buffered = bytearray()
        uids = [
            json.loads(read_response(tls, buffered).split(b"\r\n\r\n", 1)[1])["response"]["uid"]
            for _ in range(2)
        ]
    assert uids == [json.loads(BODY)["request"]["uid"], json.loads(other)["request"]["uid"]]


def test_a_connection_alternates_between_the_loop_and_a_thread(server):
    with connect(server) as tls:
        buffered = bytearray()
        for framing in (False, True, False, True, False):
            body = chunked(BODY) if framing else BODY
            tls.sendall(head("/mutate/pods", BODY, chunked=framing) + body)
            assert read_response(tls, buffered).startswith(b"HTTP/1.1 200")
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(tls, buffered).endswith(b"\r\n\r\nok\n")


def test_a_body_too_large_to_wait_for_on_the_loop_is_read_by_a_thread(server):
    big = review(pod(namespace="team-a", priority_class="high"))
    big["request"]["object"]["metadata"]["annotations"] = {"example.com/blob": "x" * INLINE_BODY_BYTES}
    body = json.dumps(big).encode()
    response = exchange(server, head("/mutate/pods", body) + body)
    assert response.startswith(b"HTTP/1.1 200")
    assert json.loads(response.split(b"\r\n\r\n", 1)[1])["response"]["allowed"] is True


@pytest.mark.parametrize(
    "request_head",
    [
        b"POST /mutate/pods HTTP/1.0\r\nContent-Type: application/json\r\n",
        b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n",
        b"GET /mutate/pods HTTP/1.1\r\nHost: x\r\nConnection: close\r\n",  # 405, a body all the same
    ],
)
def test_a_request_that_ends_its_connection_is_answered_then_closed(server, request_head):
    with connect(server) as tls:
        tls.sendall(request_head + f"Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY)
        response = read_response(tls, bytearray())
        assert tls.recv(4096) == b""  # closed after the answer
    assert b"\r\nConnection: close\r\n" in response
    assert response.startswith(b"HTTP/1.0 200" if b"HTTP/1.0" in request_head else b"HTTP/1.1 ")
    if request_head.startswith(b"GET"):
        assert response.startswith(b"HTTP/1.1 405") and b"\r\nAllow: POST\r\n" in response
