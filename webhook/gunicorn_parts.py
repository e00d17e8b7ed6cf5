"""Pieces of gunicorn replaced for the webhook's worker (webhook/worker.py): each does what
gunicorn's own does, with a deadline or for less per request."""

from __future__ import annotations

import os
import time
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
