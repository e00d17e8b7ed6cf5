"""Pieces of gunicorn replaced for the webhook's worker (webhook/worker.py): each does what
gunicorn's own does, with a deadline or for less per request."""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.http.errors import NoMoreData
from gunicorn.http.unreader import SocketUnreader

_date_cache: tuple[int, str] = (-1, "")


def _cached_http_date(timestamp: float | None = None) -> str:
    """gunicorn.util.http_date, formatted once per second: the Date header has one-second
    resolution (RFC 9110 section 5.6.7), and gunicorn formats it afresh for every response
    through email.utils.formatdate, a visible share of a small admission's CPU. The cache is
    one tuple, replaced whole, so threads never see a second with another second's text."""
    global _date_cache
    if timestamp is not None:
        return _format_http_date(timestamp)
    second = int(time.time())
    cached = _date_cache
    if cached[0] != second:
        cached = _date_cache = (second, _format_http_date(second))
    return cached[1]


_format_http_date = util.http_date
# gunicorn.http.wsgi.Response.default_headers calls util.http_date() through the module.
util.http_date = _cached_http_date


class DeadlineUnreader(SocketUnreader):
    """gunicorn's socket reader, with every read ending at `deadline` (time.monotonic()) at the
    latest. A passed deadline reads as the client having gone (NoMoreData): gunicorn then closes
    the connection quietly, as for any client that disconnects mid-request."""

    def __init__(self, sock: Any, deadline: float) -> None:
        super().__init__(sock)
        self.deadline = deadline

    def chunk(self, size_hint: int | None = None) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise NoMoreData(b"(read deadline passed)")
        before = self.sock.gettimeout()
        self.sock.settimeout(remaining)
        try:
            return super().chunk(size_hint)
        except TimeoutError:
            raise NoMoreData(b"(read deadline passed)") from None
        finally:
            self.sock.settimeout(before)


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
        # What gunicorn's wsgi.create puts in every environ, built once: its wsgi.errors wrapper
        # looks up gunicorn's logger and handlers, and SCRIPT_NAME is read from the environment.
        self.environ_base = {**wsgi.base_environ(self), "wsgi.multithread": True}
        self.script_name = os.environ.get("SCRIPT_NAME", "")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)


# gunicorn.util.close_graceful's defaults: how long a closed connection waits for the peer's FIN,
# and how much it reads meanwhile.
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 * 1024


@dataclass(eq=False)
class _Lingering:
    sock: Any
    deadline: float
    drained: int = 0


class PollerLinger:
    """gthread closes a finished connection on its event loop with gunicorn.util.close_graceful
    (RFC 9112 section 9.6: send FIN, then read what the peer still sends so that a reset does
    not cut the response short), which waits up to two seconds for the peer to close: a client
    that does not close stops the loop, every connection included, for that long. This mixin
    for a worker with a `poller` runs the same linger on the poller."""

    poller: selectors.BaseSelector

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lingering: dict[Any, _Lingering] = {}  # closed connections, oldest first

    def linger(self, sock: Any) -> None:
        """gunicorn.util.close_graceful, on the poller."""
        try:
            sock.shutdown(socket.SHUT_WR)  # an SSLSocket drops its TLS layer here
            sock.setblocking(False)
            lingering = _Lingering(sock, time.monotonic() + LINGER_SECONDS)
            self.poller.register(sock, selectors.EVENT_READ, partial(self._drain, lingering))
        except (OSError, ValueError, KeyError):  # already gone (or closed)
            util.close(sock)
            return
        self.lingering[sock] = lingering

    def _drain(self, lingering: _Lingering, _fileobj: Any = None) -> None:
        try:
            while lingering.drained < LINGER_BYTES:
                data = lingering.sock.recv(4096)
                if not data:
                    break
                lingering.drained += len(data)
        except BlockingIOError:
            return  # nothing more yet; the peer has not closed
        except OSError:  # reset: nothing more will come either
            self._end_linger(lingering)
            return
        self._end_linger(lingering)

    def _end_linger(self, lingering: _Lingering) -> None:
        self.lingering.pop(lingering.sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(lingering.sock)
        util.close(lingering.sock)

    def expire_lingering(self, now: float) -> None:
        while self.lingering:
            lingering = next(iter(self.lingering.values()))
            if lingering.deadline > now:
                break
            self._end_linger(lingering)
