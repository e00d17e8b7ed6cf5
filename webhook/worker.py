"""gunicorn's gthread worker with the TLS handshake and the request head read in its event loop.

Stock gthread (gunicorn.workers.gthread) hands every accepted socket to a pool thread, which
runs the TLS handshake (TConn.init) and reads the request head (next(conn.parser)) with blocking
calls and no deadline; its wait_for_data only waits for the first byte. A client that sends one
byte and stops holds a thread for as long as it likes, and `threads` such clients stop the worker.
A socket timeout on those calls would bound each of them, but not the queue: a request behind N
slow clients still waits N / threads timeouts for a thread.

So this worker's poller loop drives the handshake and reads the request head with non-blocking
calls: a client that is slow to get there costs a file descriptor and a buffer, never a thread,
and is closed when its deadline (--client-deadline-seconds) passes. A thread gets the connection
once the whole head is in (or the buffer is full); its reads of the request then all end within
as many seconds from when it took the connection, so a client stalling its body holds a thread
that long at most, and each write is bounded too.

The loop itself must not block either: a finished connection lingers on the poller
(webhook/gunicorn_parts.py PollerLinger), not in gunicorn's blocking close_graceful.

A request the application can answer without blocking (webhook/inline.py) is not handed to a
thread at all: the loop also waits for its body, under a deadline of its own as on a thread,
answers it and writes the response without blocking, lingering on the poller for a client slow
to take it, under the deadline again.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import ssl
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from gunicorn import http
from gunicorn import sock as gsock
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from webhook.arrival import mark_arrival
from webhook.gunicorn_parts import DeadlineUnreader, FixedConfig, PollerLinger
from webhook.inline import BufferUnreader, body_length, parse_head, respond

log = structlog.get_logger("priogate.server")

DEFAULT_CLIENT_DEADLINE_SECONDS = 10.0
# A head larger than this goes to a thread unfinished; gunicorn's own limits (limit_request_line,
# limit_request_fields, limit_request_field_size) then refuse it or read the rest, bounded.
HEAD_BUFFER_BYTES = 64 * 1024
END_OF_HEAD = b"\r\n\r\n"


class _Conn(TConn):
    """gthread's connection, whose graceful close (ThreadWorker.finish_request, on the loop)
    lingers on the poller instead of blocking the loop."""

    def __init__(self, worker: GatedThreadWorker, *args: Any) -> None:
        super().__init__(*args)
        self.worker = worker
        # The callback of every wait for the socket to be readable (on_client_socket_readable).
        self.readable = partial(worker.on_client_socket_readable, self)
        # When the request handed to a thread was complete (time.monotonic()), for the thread to
        # count its deadline from (webhook/arrival.py); None once a thread has taken it.
        self.head_at: float | None = None

    def close(self, graceful: bool = False) -> None:
        if graceful:
            self.worker.linger(self.sock)
        else:
            super().close()


@dataclass(eq=False)
class _Arrival:
    """A connection whose handshake or request head is still coming in."""

    conn: TConn
    deadline: float
    shaken: bool
    head: bytearray = field(default_factory=bytearray)
    events: int = 0  # what it waits for in the poller; 0: not registered
    # Once its head is parsed for an inline answer: the request, its bytes, what is still to come.
    req: Any = None
    unreader: BufferUnreader | None = None
    missing: int = 0


@dataclass(eq=False)
class _Departure:
    """An inline response the client has not taken in whole yet."""

    conn: _Conn
    data: memoryview
    keepalive: bool
    rest: bytes  # what the client sent after the request (pipelined)
    deadline: float
    events: int = 0


class GatedThreadWorker(PollerLinger, ThreadWorker):
    """`worker_class` for webhook/server.py. The deadline comes from the application object
    (WebhookServer.client_deadline_seconds)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "h2" in (self.cfg.http_protocols or ()):
            # The gate reads HTTP/1.1 heads; an HTTP/2 connection would need its own path.
            raise RuntimeError("GatedThreadWorker serves HTTP/1.1 only; set http_protocols to h1")
        self.deadline_seconds = float(
            getattr(self.app, "client_deadline_seconds", DEFAULT_CLIENT_DEADLINE_SECONDS)
        )
        # Oldest first: every arrival gets the same deadline from its admission, so the first
        # one is always the next to expire.
        self.arrivals: dict[TConn, _Arrival] = {}
        self.departures: dict[TConn, _Departure] = {}  # inline responses being sent, oldest first
        self._stop_by: float | None = None
        # The application's `serves_inline(path)`, if it has one (webhook/app.py): whether it
        # answers a request for `path` without blocking, so the loop may answer it itself.
        self._serves_inline: Any = None
        self._fixed_cfg = FixedConfig(self.cfg)
        self._next_heartbeat = self._next_parent_check = 0.0

    def run(self) -> None:
        # With the PROXY protocol, only a connection's first request carries its header, and a
        # thread's parser counts the requests it has seen (gunicorn's Request req_number):
        # answers on the loop would make it look for the header again, so there are none.
        if self.cfg.proxy_protocol == "off":
            self._serves_inline = getattr(self.wsgi, "serves_inline", None)  # loaded by now
        super().run()

    # ThreadWorker.run calls these two on every turn of its loop, a system call each (utime on
    # the heartbeat file, getppid), which under load is every request or two. The arbiter wants
    # a heartbeat within `timeout` (30 s) and an idle loop turns once a second, so once a second
    # is as often as an idle gthread worker does either.

    def notify(self) -> None:
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + 1.0
            super().notify()

    def is_parent_alive(self) -> bool:
        now = time.monotonic()
        if now < self._next_parent_check:
            return True
        self._next_parent_check = now + 1.0
        return super().is_parent_alive()

    # ---- the gate: runs on the poller loop (the main thread) ---------------------------------

    def accept(self, listener: Any) -> None:
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = _Conn(self, self.cfg, client, addr, listener.getsockname())  # non-blocking from here
        if self.cfg.is_ssl:
            try:
                conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                    conn.sock,
                    server_side=True,
                    do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                )
            except (OSError, ValueError) as e:  # the peer is gone, or no usable certificate
                log.warning("could not start tls on a connection", peer=_peer(addr), error=str(e))
                self._drop(conn)
                return
        self._admit(conn, shaken=not self.cfg.is_ssl)

    def on_client_socket_readable(self, conn: TConn, client: Any) -> None:
        # Every wait for a connection to be readable ends here: more of a request or response
        # under way, or a kept-alive connection's next request, which goes through the gate
        # again, not straight to a thread. So the socket stays registered as it is from one
        # inline answer to the next, and those cost the poller nothing.
        state = self.arrivals.get(conn) or self.departures.get(conn)
        if isinstance(state, _Arrival):
            self._advance(state)
        elif state is not None:
            self._send(state)
        else:
            self.keepalived_conns.remove(conn)
            arrival = _Arrival(conn, self._deadline(), shaken=True, events=selectors.EVENT_READ)
            self.arrivals[conn] = arrival
            self._advance(arrival)

    def _deadline(self) -> float:
        deadline = time.monotonic() + self.deadline_seconds
        return deadline if self._stop_by is None else min(deadline, self._stop_by)

    def _admit(self, conn: TConn, *, shaken: bool) -> None:
        arrival = _Arrival(conn, self._deadline(), shaken)
        self.arrivals[conn] = arrival
        self._advance(arrival)

    def _advance(self, arrival: _Arrival, _fileobj: Any = None) -> None:
        """Take the handshake, the head and (for an inline answer) the body as far as the bytes
        at hand allow."""
        sock = arrival.conn.sock
        try:
            if not arrival.shaken:
                sock.do_handshake()
                arrival.shaken = True
            if arrival.unreader is None:
                while len(arrival.head) < HEAD_BUFFER_BYTES and END_OF_HEAD not in arrival.head:
                    data = sock.recv(HEAD_BUFFER_BYTES)
                    if not data:
                        self._close(arrival)  # gone before sending a whole request
                        return
                    arrival.head += data
                if not self._await_body(arrival):
                    self._hand_over(arrival)
                    return
            while arrival.missing > 0:
                # Never less than a TLS record: what is read stays nowhere but here, so the
                # poller sees the socket readable again only for bytes not yet taken.
                data = sock.recv(max(arrival.missing, HEAD_BUFFER_BYTES))
                if not data:
                    self._close(arrival)
                    return
                arrival.unreader.feed(data)
                arrival.missing -= len(data)
        except ssl.SSLWantWriteError:
            self._wait(arrival, selectors.EVENT_WRITE, self._advance)
            return
        except (ssl.SSLWantReadError, BlockingIOError):
            self._wait(arrival, selectors.EVENT_READ, self._advance)
            return
        except OSError as e:  # a refused handshake (no or a wrong client certificate), a reset
            log.debug("connection closed before its request", peer=_peer(arrival.conn.client), error=str(e))
            self._close(arrival)
            return
        self._serve_inline(arrival)

    def _await_body(self, arrival: _Arrival) -> bool:
        """Whether the request is answered on the loop: the application serves its path without
        blocking, its head parses, and its body has a length the loop may wait for."""
        if self._serves_inline is None:
            return False
        conn = arrival.conn
        parsed = parse_head(self._fixed_cfg, bytes(arrival.head), conn.client)
        if parsed is None:
            return False
        req, unreader = parsed
        length = body_length(req)
        if length is None or not self._serves_inline(req.path):
            return False
        arrival.req, arrival.unreader = req, unreader
        arrival.missing = length - unreader.buffered()
        if arrival.missing > 0:
            # The body gets a deadline of its own, as on a thread (handle()); last in the queue.
            del self.arrivals[conn]
            arrival.deadline = self._deadline()
            self.arrivals[conn] = arrival
        return True

    def _wait(self, state: _Arrival | _Departure, events: int, step: Any) -> None:
        if state.events == events:
            return
        callback = state.conn.readable if events == selectors.EVENT_READ else partial(step, state)
        if state.events:
            self.poller.modify(state.conn.sock, events, callback)
        else:
            self.poller.register(state.conn.sock, events, callback)
        state.events = events

    def _forget(self, state: _Arrival | _Departure) -> None:
        table: dict[TConn, Any] = self.arrivals if isinstance(state, _Arrival) else self.departures
        table.pop(state.conn, None)
        if state.events:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(state.conn.sock)
            state.events = 0

    def _hand_over(self, arrival: _Arrival) -> None:
        self._forget(arrival)
        conn = arrival.conn
        if conn.parser is None:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
            conn.parser.unreader = DeadlineUnreader(conn.sock, arrival.deadline)
        conn.parser.unreader.unread(bytes(arrival.head))
        conn.head_at = time.monotonic()  # the request is here; a thread may take a while to come
        # Past TConn.init (the handshake is done) and past wait_for_data (the head is here).
        conn.initialized = True
        conn.data_ready = True
        self.enqueue_req(conn)

    def _serve_inline(self, arrival: _Arrival) -> None:
        del self.arrivals[arrival.conn]  # its registration, if any, passes to the departure
        conn, req = arrival.conn, arrival.req
        data, keepalive = respond(self, self._fixed_cfg, req, conn)
        # What the application left of the body (gunicorn's Parser.finish_body), so that what
        # remains is whatever the client sent after this request.
        while req.body.read(HEAD_BUFFER_BYTES):
            continue
        rest = arrival.unreader.rest()
        departure = _Departure(conn, memoryview(data), keepalive, rest, self._deadline(), arrival.events)
        self.departures[conn] = departure
        self._send(departure)

    def _send(self, departure: _Departure, _fileobj: Any = None) -> None:
        sock = departure.conn.sock
        try:
            while departure.data:
                departure.data = departure.data[sock.send(departure.data) :]
        except (ssl.SSLWantWriteError, BlockingIOError):
            self._wait(departure, selectors.EVENT_WRITE, self._send)
            return
        except ssl.SSLWantReadError:  # TLS 1.3 post-handshake messages to read first
            self._wait(departure, selectors.EVENT_READ, self._send)
            return
        except OSError as e:
            log.debug("closed before its response", peer=_peer(departure.conn.client), error=str(e))
            self._forget(departure)
            self._drop(departure.conn)
            return
        conn = departure.conn
        if not departure.keepalive or departure.rest:
            self._forget(departure)
            if departure.keepalive:  # a pipelined request: a thread takes it, with what has come
                self._hand_over(_Arrival(conn, self._deadline(), True, bytearray(departure.rest)))
            else:
                self.nr_conns -= 1
                conn.close(graceful=True)
            return
        # Back to the kept-alive connections, as ThreadWorker.finish_request does.
        del self.departures[conn]
        conn.timeout = time.monotonic() + self._fixed_cfg.keepalive  # TConn.set_timeout
        if not self.alive:
            conn.timeout = min(conn.timeout, time.monotonic() + STOP_KEEPALIVE_LINGER)
        self.keepalived_conns.append(conn)
        if departure.events == selectors.EVENT_WRITE:
            self.poller.modify(conn.sock, selectors.EVENT_READ, conn.readable)
        elif not departure.events:
            self.poller.register(conn.sock, selectors.EVENT_READ, conn.readable)

    def _close(self, arrival: _Arrival) -> None:
        self._forget(arrival)
        self._drop(arrival.conn)

    def _drop(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self) -> None:
        # Called by ThreadWorker.run on every turn of the loop (at least once a second), also
        # while stopping: expire arrivals and lingering closes as gunicorn expires its own
        # pending connections.
        super().murder_pending()
        now = time.monotonic()
        if not self.alive and self._stop_by is None:
            # Stopping: like kept-alive connections (ThreadWorker._cap_keepalive), arrivals and
            # departures get a short while to finish, not their whole deadline.
            self._stop_by = now + STOP_KEEPALIVE_LINGER
            for state in (*self.arrivals.values(), *self.departures.values()):
                state.deadline = min(state.deadline, self._stop_by)
        while self.arrivals:
            arrival = next(iter(self.arrivals.values()))
            if arrival.deadline > now:
                break
            log.debug("request head deadline passed", peer=_peer(arrival.conn.client))
            self._close(arrival)
        while self.departures:
            departure = next(iter(self.departures.values()))
            if departure.deadline > now:
                break
            log.debug("response deadline passed", peer=_peer(departure.conn.client))
            self._forget(departure)
            self._drop(departure.conn)
        self.expire_lingering(now)

    # ---- the thread ---------------------------------------------------------------------------

    def handle(self, conn: TConn) -> Any:
        # The read deadline runs from when a thread takes the connection, not from when it was
        # queued: time spent waiting for a busy pool is not the client's fault.
        unreader = getattr(conn.parser, "unreader", None)
        if isinstance(unreader, DeadlineUnreader):
            unreader.deadline = time.monotonic() + self.deadline_seconds
        return super().handle(conn)

    def handle_request(self, req: Any, conn: TConn) -> bool:
        # Writes get the deadline too, per call: a client that stops reading its response holds
        # the thread that long at most (ThreadWorker.handle has just made the socket blocking).
        conn.sock.settimeout(self.deadline_seconds)
        # Only the first request after a hand-over waited in the queue; a pipelined one read on
        # this thread did not.
        mark_arrival(getattr(conn, "head_at", None))
        conn.head_at = None
        try:
            return super().handle_request(req, conn)
        finally:
            mark_arrival(None)


def _peer(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)
