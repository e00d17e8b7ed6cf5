"""Answering a request on the worker's event loop, from bytes already received (webhook/worker.py).

A priority admission is pure CPU over a watch cache: handing it to a pool thread costs more than
answering it (a future, a pipe write to wake the loop, GIL hand-offs between the loop and the
thread, socket mode and timeout flips). So when the application says a request never blocks
(its `serves_inline(path)`), the loop parses the head with gunicorn's own parser, waits for the
body on the poller, runs the application and writes the response without blocking: the same
gunicorn Request, environ and Response as a thread's, only read from memory and written in one
piece.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gunicorn.http import wsgi
from gunicorn.http.body import LengthReader
from gunicorn.http.errors import ParseException
from gunicorn.http.message import Request
from gunicorn.http.unreader import Unreader

# A body larger than this is read by a thread as before (gunicorn's blocking reads, bounded by
# the deadline): the loop holds what it has read in memory until the request is complete.
INLINE_BODY_BYTES = 1024 * 1024


class FixedConfig:
    """A worker's gunicorn Config with every setting read once. Config.__getattr__
    (gunicorn/config.py) looks a setting up on each read, some twenty times per request; a
    worker's settings never change (a reload starts new workers). Config's own properties and
    methods (is_ssl, sendfile, forwarded_allow_networks()) are still its own."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg
        own = type(cfg)
        self.__dict__.update({k: s.get() for k, s in cfg.settings.items() if not hasattr(own, k)})
        self.is_ssl = cfg.is_ssl

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)


class Incomplete(Exception):
    """The parser asked for more bytes than have arrived."""


class BufferUnreader(Unreader):
    """gunicorn's Unreader over bytes already received: it never touches the socket."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._pending = [data] if data else []
        self.pending_bytes = len(data)

    def feed(self, data: bytes) -> None:
        self._pending.append(data)
        self.pending_bytes += len(data)

    def chunk(self, size_hint: int | None = None) -> bytes:
        if not self._pending:
            raise Incomplete()
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self.pending_bytes = 0
        return data

    def buffered(self) -> int:
        """Bytes received and not yet read by the parser or the body reader."""
        return len(self.buf.getbuffer()) + self.pending_bytes

    def rest(self) -> bytes:
        """What follows the request (a pipelined next request), taken out."""
        return self.take_buffered() + b"".join(self._pending)


def parse_head(cfg: Any, data: bytes, peer: Any, number: int) -> tuple[Request, BufferUnreader] | None:
    """gunicorn's Request for a complete head in `data`, or None when it cannot be served from
    memory: a bad head (a thread parses it again and answers gunicorn's 4xx, as for any request)
    or one whose end is not in `data` yet."""
    unreader = BufferUnreader(data)
    try:
        return Request(cfg, unreader, peer, number), unreader
    except (Incomplete, ParseException, StopIteration):
        return None


def body_length(req: Request) -> int | None:
    """The length of a body this path may wait for on the loop, or None if a thread must read it:
    chunked or unframed bodies, a body over INLINE_BODY_BYTES, and `Expect: 100-continue` (the
    client waits for gunicorn's interim answer, which wsgi.create writes with a blocking send)."""
    reader = req.body.reader
    if not isinstance(reader, LengthReader) or req._expected_100_continue:
        return None
    return reader.length if reader.length <= INLINE_BODY_BYTES else None


class _Sink:
    """Collects what gunicorn writes with util.write (sock.sendall)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.parts.append(data)

    def gettimeout(self) -> float:
        # Non-blocking already, to util.write_nonblock (Worker.handle_error's error page).
        return 0.0


class BufferedResponse(wsgi.Response):
    """gunicorn's HTTP/1 response, written into memory, so the loop sends it in one piece (one
    TLS record for head and body) without blocking."""

    def __init__(self, req: Request, sock: Any, cfg: Any) -> None:
        super().__init__(req, _Sink(), cfg)

    def output(self) -> bytes:
        return b"".join(self.sock.parts)


def respond(worker: Any, cfg: FixedConfig, req: Request, conn: Any) -> tuple[bytes, bool]:
    """The response's bytes and whether the connection stays open: gunicorn's
    ThreadWorker.handle_request (gunicorn/workers/gthread.py) with a BufferedResponse. An
    exception from the application becomes gunicorn's own error page (Worker.handle_error), and
    the connection closes, as on a thread; nothing has reached the socket yet, so that page
    replaces whatever the application had begun to answer."""
    environ: dict[str, Any] = {}
    resp = None
    try:
        cfg.pre_request(worker, req)
        started = datetime.now()
        resp, environ = wsgi.create(
            req, conn.sock, conn.client, conn.server, cfg, response_class=BufferedResponse
        )
        environ["wsgi.multithread"] = True
        worker.nr += 1
        if worker.nr >= worker.max_requests:
            if worker.alive:
                worker.log.info("Autorestarting worker after current request.")
                worker.alive = False
            resp.force_close()
        if not worker.alive or not cfg.keepalive or len(worker.keepalived_conns) >= worker.max_keepalived:
            resp.force_close()
        respiter = worker.wsgi(environ, resp.start_response)
        try:
            for item in respiter:
                resp.write(item)
            resp.close()
        finally:
            worker.log.access(resp, req, environ, datetime.now() - started)
            if hasattr(respiter, "close"):
                respiter.close()
        return resp.output(), not resp.should_close()
    except Exception as e:
        page = _Sink()
        worker.handle_error(req, page, conn.client, e)
        return b"".join(page.parts), False
    finally:
        try:
            cfg.post_request(worker, req, environ, resp)
        except Exception:
            worker.log.exception("Exception in post_request hook")
