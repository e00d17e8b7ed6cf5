"""The preempt extender's HTTPS server (controller/extender.py answers): the standard library's
threading server, a certificate reloaded when its files change, and the TLS handshake in each
connection's own thread."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import socket
from typing import Any

from controller.extender import MAX_BODY, PREEMPT_PATH, BadRequest, PreemptExtender, log


class _Tls:
    """The serving certificate, reloaded when its files change (certs/ rotates them in place)."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self._stamp: tuple[float, float] | None = None
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        stamp = (os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime)
        with self._lock:
            if self._context is None or stamp != self._stamp:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                context.load_cert_chain(self.cert_file, self.key_file)
                self._context, self._stamp = context, stamp
            return self._context


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, tls: _Tls) -> None:
        self.tls = tls
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket, Any]:
        sock, address = super().get_request()
        sock.settimeout(10)
        # The handshake runs in the request's thread (Handler.setup), not in the accept loop,
        # so a slow client never holds other connections back.
        return self.tls.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


def check_tls(cert_file: str, key_file: str) -> None:
    """ValueError naming the files when the serving certificate cannot be loaded: the controller
    refuses to start rather than serve an extender every call to which fails."""
    try:
        _Tls(cert_file, key_file).context()
    except (OSError, ssl.SSLError) as e:
        raise ValueError(
            f"cannot load the preempt extender's serving certificate (--cert-file {cert_file}, "
            f"--key-file {key_file}): {e}"
        ) from None


def serve(bind: str, cert_file: str, key_file: str, extender: PreemptExtender) -> ThreadingHTTPServer:
    host, _, port = bind.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connections

        def handle(self) -> None:
            # The TLS handshake first (get_request defers it to this thread); a client that
            # fails it or goes away gets nothing, and the server logs no traceback for it.
            with contextlib.suppress(ssl.SSLError, ConnectionError, TimeoutError):
                self.request.do_handshake()
                super().handle()

        def do_POST(self) -> None:
            if self.path.rstrip("/") != PREEMPT_PATH:
                self._send(404, {"error": f"not found: {self.path}; the preempt verb is {PREEMPT_PATH}"})
                return
            try:
                length = int(self.headers.get("Content-Length") or "")
            except ValueError:
                self._send(411, {"error": "Content-Length required"})
                return
            if length < 0 or length > MAX_BODY:
                self._send(413, {"error": f"body larger than {MAX_BODY} bytes"})
                self.close_connection = True
                return
            body = self.rfile.read(length)
            try:
                code, reply = extender.handle(body)
            except BadRequest as e:
                code, reply = 400, {"error": str(e)}
            except Exception:
                log.exception("preempt extender failed")
                code, reply = 500, {"error": "internal error (see the controller's log)"}
            self._send(code, reply)

        def do_GET(self) -> None:
            self._send(405, {"error": f"POST {PREEMPT_PATH}"})

        def _send(self, code: int, reply: Mapping[str, Any]) -> None:
            data = json.dumps(reply, separators=(",", ":")).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return  # one line per preemption attempt would drown the JSON log

    server = _Server((host or "0.0.0.0", int(port)), Handler, _Tls(cert_file, key_file))
    threading.Thread(target=server.serve_forever, name="extender", daemon=True).start()
    return server
