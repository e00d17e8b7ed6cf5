"""Which requests the worker answers on its event loop, and how it sends an answer a client is
slow to take (webhook/inline.py, webhook/worker.py)."""

from __future__ import annotations

import json
import os
import selectors
import socket
import time
from types import SimpleNamespace

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger
from gunicorn.http import wsgi

from tests.builders import SYSTEM_CLASSES, make_app, make_view, pod, priority_class, review
from webhook.app import create_app
from webhook.gunicorn_parts import FixedConfig
from webhook.inline import (
    INLINE_BODY_BYTES,
    BufferedResponse,
    body_length,
    environ_for,
    parse_head,
    respond,
)
from webhook.worker import GatedThreadWorker, _Conn, _Departure

CLASSES = [*SYSTEM_CLASSES, priority_class("high", value=1000)]
BODY = json.dumps(review(pod(namespace="team-a", priority_class="high"))).encode()


def config() -> Config:
    cfg = Config()
    for key, value in {"forwarder_headers": "", "secure_scheme_headers": {}, "loglevel": "warning"}.items():
        cfg.set(key, value)
    return cfg


def request(extra: str = "", length: int = len(BODY)) -> bytes:
    head = f"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
    return f"{head}Content-Length: {length}\r\n\r\n".encode()


def test_a_fixed_config_reads_as_gunicorns():
    cfg = config()
    fixed = FixedConfig(cfg)
    for name in cfg.settings:
        assert getattr(fixed, name) == getattr(cfg, name), name
    assert fixed.is_ssl == cfg.is_ssl
    assert fixed.sendfile == cfg.sendfile  # a Config property over a setting of the same name


def test_the_loop_waits_only_for_a_body_of_known_length():
    cfg = config()

    def length(data: bytes) -> int | None:
        parsed = parse_head(cfg, data, ("127.0.0.1", 1))
        return None if parsed is None else body_length(parsed[0])

    assert length(request() + BODY[:10]) == len(BODY)
    assert length(request(length=INLINE_BODY_BYTES)) == INLINE_BODY_BYTES
    assert length(request(length=INLINE_BODY_BYTES + 1)) is None  # a thread reads it
    assert length(request("Expect: 100-continue\r\n")) is None  # the client waits for gunicorn's 100
    chunked = b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert length(chunked) is None
    assert length(b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\n") is None  # the head is not all here
    assert length(b"POST /mutate/pods HTTP/1.1\r\nBad Header: x\r\n\r\n") is None  # a thread answers 400
    assert length(request("Content-Length: 3\r\n")) is None  # two lengths: 400, from a thread


def test_the_environ_is_gunicorns_but_for_early_hints():
    cfg = config()
    fixed = FixedConfig(cfg)
    data = request("X-Seen: a\r\nX-Seen: b\r\n").replace(b"/mutate/pods", b"/mutate/p%6Fds?dryRun=1")
    req, _ = parse_head(fixed, data, ("10.0.0.7", 41000))
    conn = SimpleNamespace(sock=None, client=("10.0.0.7", 41000), server=("0.0.0.0", 8443))
    _, theirs = wsgi.create(req, None, conn.client, conn.server, cfg, BufferedResponse)
    theirs["wsgi.multithread"] = True
    ours = environ_for(req, conn, fixed)
    assert set(theirs) - set(ours) == {"wsgi.early_hints"}
    assert set(ours) == set(theirs) - {"wsgi.early_hints"}
    for key, value in ours.items():
        if key != "wsgi.errors":  # one wrapper per worker, not one per request
            assert value == theirs[key], key
    assert ours["PATH_INFO"] == "/mutate/pods" and ours["HTTP_X_SEEN"] == "a,b"


def test_only_the_priority_servers_rule_sets_are_answered_inline():
    app = make_app(CLASSES)
    assert app.serves_inline("/mutate/pods")
    assert app.serves_inline("/validate/priorityclasses")
    assert not app.serves_inline("/validate/pods")  # quota: writes the ledger
    assert not app.serves_inline("/healthz")
    assert not app.serves_inline("/nowhere")
    starting = create_app(make_view(CLASSES, synced=False))
    assert not starting.serves_inline("/mutate/pods")  # cache_refusal would wait for the cache


def worker(app: object = None) -> GatedThreadWorker:
    cfg = config()
    w = GatedThreadWorker(
        age=1, ppid=os.getppid(), sockets=[], app=SimpleNamespace(), timeout=30, cfg=cfg, log=Logger(cfg)
    )
    w.wsgi = app
    w.poller = selectors.DefaultSelector()
    return w


def test_respond_answers_as_the_app_does_with_gunicorns_response():
    w = worker(make_app(CLASSES))
    req, unreader = parse_head(w._fixed_cfg, request() + BODY, ("127.0.0.1", 1))
    conn = SimpleNamespace(sock=None, client=("127.0.0.1", 1), server=("127.0.0.1", 8443))
    data, keepalive = respond(w, w._fixed_cfg, req, conn)
    head, _, body = data.partition(b"\r\n\r\n")
    assert keepalive
    assert head.startswith(b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nDate: ")
    assert b"\r\nConnection: keep-alive\r\nContent-Type: application/json\r\n" in head
    assert f"\r\nContent-Length: {len(body)}".encode() in head
    assert json.loads(body)["response"]["allowed"] is True
    assert unreader.rest() == b""


def test_an_app_that_raises_gets_gunicorns_error_page_and_a_close():
    def broken(environ: dict, start_response: object) -> list[bytes]:
        raise RuntimeError("boom")

    w = worker(broken)
    req, _ = parse_head(w._fixed_cfg, request() + BODY, ("127.0.0.1", 1))
    conn = SimpleNamespace(sock=None, client=("127.0.0.1", 1), server=("127.0.0.1", 8443))
    data, keepalive = respond(w, w._fixed_cfg, req, conn)
    assert data.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert not keepalive


@pytest.fixture
def pair():
    server, client = socket.socketpair()
    yield server, client
    client.close()


def departing(w: GatedThreadWorker, sock: socket.socket, data: bytes) -> _Departure:
    conn = _Conn(w, w.cfg, sock, ("127.0.0.1", 1), ("127.0.0.1", 8443))
    w.nr_conns += 1
    departure = _Departure(conn, memoryview(data), True, b"", w._deadline())
    w.departures[conn] = departure
    return departure


def test_a_response_the_client_is_slow_to_take_is_sent_from_the_poller(pair):
    server, client = pair
    w = worker()
    data = os.urandom(8 * 1024 * 1024)  # more than the socket buffers hold
    departure = departing(w, server, data)
    w._send(departure)
    assert departure.data and departure.events == selectors.EVENT_WRITE  # waiting, not blocking
    received = bytearray()
    while len(received) < len(data):
        received += client.recv(1 << 20)
        for key, _ in w.poller.select(0):
            key.data(key.fileobj)
    assert bytes(received) == data
    assert not w.departures
    assert list(w.keepalived_conns) == [departure.conn]  # kept alive, waiting for the next request
    assert w.poller.get_key(server).events == selectors.EVENT_READ


def test_a_response_the_client_never_takes_is_dropped_at_its_deadline(pair):
    server, _client = pair
    w = worker()
    departure = departing(w, server, os.urandom(8 * 1024 * 1024))
    w._send(departure)
    assert departure.data
    departure.deadline = time.monotonic() - 1
    w.murder_pending()
    assert not w.departures and w.nr_conns == 0
    assert server.fileno() == -1  # closed


def test_the_heartbeat_and_the_parent_check_run_at_most_once_a_second(monkeypatch):
    w = worker()
    beats, checks = [], []
    monkeypatch.setattr(w.tmp, "notify", lambda: beats.append(1))
    monkeypatch.setattr(os, "getppid", lambda: checks.append(1) or w.ppid)
    for _ in range(100):
        w.notify()
        assert w.is_parent_alive()
    assert (len(beats), len(checks)) == (1, 1)
    w._next_heartbeat = w._next_parent_check = time.monotonic() - 0.001  # a second later
    w.notify()
    assert w.is_parent_alive()
    assert (len(beats), len(checks)) == (2, 2)
