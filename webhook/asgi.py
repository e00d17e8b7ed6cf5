"""The server's app as ASGI, for gunicorn's asyncio worker (the `asgi` worker class it ships).

One event loop per worker process serves every connection: gunicorn's own code does the TLS, the
HTTP/1.1 parsing and the writes (https://docs.gunicorn.org/en/stable/asgi.html), and a client
that stalls costs a coroutine, not a thread, so it holds up nobody else. The app is the same WSGI
app as before (webhook.endpoints in front of Flask), called with an environ made from the ASGI
scope: a priority admission (CPU only over the caches, tens of µs) is answered on the loop
itself, with no hand-off, and again on a thread in the rare case it must wait (a class the cache
lacks is read from the API server: webhook/loop.py); everything else that may block (a ledger
turn, a quorum read, a relay, the Flask routes) runs on a pool of threads, so the loop goes on
reading and writing meanwhile.

Measured with `make bench-webhook` (docs/benchmarks.md): with gthread, each busy keep-alive
connection was a thread, and 8 of them on one core took turns with the GIL, so the unluckiest
request waited behind several rounds of the others.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from webhook import metrics
from webhook.endpoints import ARRIVED_ENVIRON, MAX_BODY_BYTES, Answer, plain
from webhook.loop import WouldBlock, answering_on_loop

log = structlog.get_logger("priogate.webhook")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class ClientGone(Exception):
    pass


class AsgiApp:
    def __init__(
        self,
        wsgi: WSGIApp,
        inline: Callable[[str], bool],
        *,
        threads: int,
        body_seconds: float,
        every_second: Sequence[Callable[[], None]] = (),
    ) -> None:
        """`inline(path)`: a POST there is answered on the loop (its rule set never blocks);
        the rest on `threads` threads. `body_seconds`: how long the app waits for each part of a
        request body before it answers 408. `every_second`: called on the loop once a second
        (the TLS context's refresh, which must run where the handshakes are made)."""
        self.wsgi = wsgi
        self.inline = inline
        self.body_seconds = body_seconds
        self.every_second = every_second
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="app")
        self._ticker: asyncio.Task[None] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # gunicorn speaks HTTP/1.1 here (no websocket routes)
        arrived = time.monotonic()
        try:
            body = await self._body(scope, receive)
        except ClientGone:
            return
        except TimeoutError:
            metrics.CLIENT_TIMEOUTS.inc()
            await _send(send, plain(408, f"request body not received within {self.body_seconds:g} s"))
            return
        if body is None:
            await _send(send, plain(413, f"body larger than {MAX_BODY_BYTES} bytes"))
            return
        environ = wsgi_environ(scope, body)
        environ[ARRIVED_ENVIRON] = arrived
        answer = None
        if scope["method"] == "POST" and self.inline(scope["path"]):
            try:
                with answering_on_loop():
                    answer = call_wsgi(self.wsgi, environ)
            except WouldBlock:
                environ["wsgi.input"].seek(0)  # answered again from the start, on a thread
        if answer is None:
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(self.pool, call_wsgi, self.wsgi, environ)
        await _send(send, answer)

    async def _body(self, scope: dict[str, Any], receive: Receive) -> bytes | None:
        """The whole body, or None when it is larger than MAX_BODY_BYTES (refused unread when
        its Content-Length says so)."""
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY_BYTES:
                return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await asyncio.wait_for(receive(), self.body_seconds)
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._ticker = asyncio.create_task(self._tick())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._ticker is not None:
                    self._ticker.cancel()
                self.pool.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for call in self.every_second:
                try:
                    call()
                except Exception:  # a failing call must not stop the others, or the next tick
                    log.exception("periodic call failed", call=getattr(call, "__qualname__", repr(call)))


def wsgi_environ(scope: dict[str, Any], body: bytes) -> dict[str, Any]:
    """A WSGI environ (PEP 3333) for an ASGI HTTP scope whose body has been read."""
    server = scope.get("server") or ("", 0)
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", ""),
        "PATH_INFO": scope["path"],
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": str(client[0]),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "https"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        if name == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = value
        elif name != "CONTENT_LENGTH":  # the body read decides it
            key = f"HTTP_{name}"
            environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def call_wsgi(app: WSGIApp, environ: dict[str, Any]) -> Answer:
    """The app's status line, headers and whole body."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started[:] = [status, headers]

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return started[0], started[1], body


async def _send(send: Send, answer: Answer) -> None:
    status, headers, body = answer
    await send(
        {
            "type": "http.response.start",
            "status": int(status.split(" ", 1)[0]),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
