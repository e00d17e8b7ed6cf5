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

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.http.body import LengthReader
from gunicorn.http.errors import ConfigurationProblem, ParseException
from gunicorn.http.message import Request
from gunicorn.http.unreader import Unreader

from webhook.gunicorn_parts import FixedConfig

# A body larger than this is read by a thread as before (gunicorn's blocking reads, bounded by
# the deadline). The loop holds every waiting body in memory at once, for up to worker_connections
# clients, so this bounds that as the head buffer (webhook/worker.py) bounds a head; a pod's
# review, oldObject and managedFields included, is rarely near it.
INLINE_BODY_BYTES = 64 * 1024


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


def parse_head(cfg: Any, data: bytes, peer: Any) -> tuple[Request, BufferUnreader] | None:
    """gunicorn's Request for a complete head in `data`, or None when it cannot be served from
    memory: a bad head (a thread parses it again and answers gunicorn's 4xx, as for any request)
    or one whose end is not in `data` yet."""
    unreader = BufferUnreader(data)
    try:
        # The request's number on its connection matters only to the PROXY protocol, which
        # inline answers do not serve (webhook/worker.py).
        return Request(cfg, unreader, peer, 1), unreader
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


def environ_for(req: Request, conn: Any, cfg: FixedConfig) -> dict[str, Any]:
    """The environ gunicorn's wsgi.create (gunicorn/http/wsgi.py) builds for a TCP peer, less
    its wsgi.early_hints callback, which nothing here sends, and with the constant keys copied:
    the same keys and values otherwise, the headers mapped by the same rule."""
    environ = cfg.environ_base.copy()
    environ["wsgi.input"] = req.body
    environ["gunicorn.socket"] = conn.sock
    environ["REQUEST_METHOD"] = req.method
    environ["QUERY_STRING"] = req.query
    environ["RAW_URI"] = req.uri
    environ["SERVER_PROTOCOL"] = "HTTP/{}.{}".format(*req.version)
    repeated: dict[str, list[str]] = {}
    for name, value in req.headers:
        if name == "CONTENT-TYPE":
            environ["CONTENT_TYPE"] = value
        elif name == "CONTENT-LENGTH":
            environ["CONTENT_LENGTH"] = value
        else:
            key = "HTTP_" + name.replace("-", "_")
            if key in environ:
                repeated.setdefault(key, [environ[key]]).append(value)
            else:
                environ[key] = value
    for key, values in repeated.items():
        environ[key] = ",".join(values)
    environ["wsgi.url_scheme"] = req.scheme
    environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = conn.client[0], str(conn.client[1])
    environ["SERVER_NAME"], environ["SERVER_PORT"] = conn.server[0], str(conn.server[1])
    path, script_name = req.path, cfg.script_name
    if script_name:
        if not path.startswith(script_name):
            raise ConfigurationProblem(
                f"Request path {path!r} does not start with SCRIPT_NAME {script_name!r}"
            )
        path = path[len(script_name) :]
    environ["PATH_INFO"] = util.unquote_to_wsgi_str(path)
    environ["SCRIPT_NAME"] = script_name
    return environ


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
        resp = BufferedResponse(req, conn.sock, cfg)
        if isinstance(conn.server, tuple):
            environ = environ_for(req, conn, cfg)
        else:  # a unix socket: gunicorn's own rules for the server's name and port
            resp, environ = wsgi.create(req, conn.sock, conn.client, conn.server, cfg, BufferedResponse)
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
