"""Start the real webhook server (gunicorn, TLS) in a subprocess, for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from certs import issue_ca, issue_leaf, write_pem
from localcluster.procs import free_ports

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class RunningServer:
    process: subprocess.Popen
    port: int
    ca_file: Path
    cert_file: Path
    key_file: Path
    log_file: Path
    # With --client-ca-file: a client certificate signed by that CA, which ssl_context() presents.
    client_cert: tuple[Path, Path] | None = None
    # With --health-bind: the plain-HTTP health and metrics port.
    health_port: int | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, context=self.ssl_context(), timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                return self.process.wait()
        return self.process.returncode


def start_server(
    workdir: Path,
    classes: Sequence[dict],
    *,
    workers: int = 2,
    threads: int | None = None,
    serve: str | None = None,
    cpu_list: str | None = None,
    ready_timeout: float = 30,
    client_ca: bool = False,
    client_deadline_seconds: float | None = None,
    health: bool = False,
) -> RunningServer:
    workdir.mkdir(parents=True, exist_ok=True)
    ca = issue_ca()
    leaf = issue_leaf(ca, "priogate-test", ip_addresses=["127.0.0.1"], dns_names=["localhost"], client=True)
    ca_file, cert_file, key_file = workdir / "ca.crt", workdir / "tls.crt", workdir / "tls.key"
    write_pem(ca_file, ca.cert_pem)
    # Its key too: a test issues other certificates from the serving CA.
    write_pem(workdir / "ca.key", ca.key_pem, private=True)
    write_pem(cert_file, leaf.cert_pem)
    write_pem(key_file, leaf.key_pem, private=True)
    classes_file = workdir / "priorityclasses.yaml"
    classes_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(classes)}))
    port, health_port = free_ports(2)
    cmd = [
        sys.executable,
        "-m",
        "webhook",
        "--bind",
        f"127.0.0.1:{port}",
        "--cert-file",
        str(cert_file),
        "--key-file",
        str(key_file),
        "--priorityclasses-file",
        str(classes_file),
        "--workers",
        str(workers),
        "--log-level",
        "WARNING",
    ]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    if serve is not None:
        cmd += ["--serve", serve]
    client_cert = None
    if client_ca:
        client_ca_pair = issue_ca("priogate-test-client-ca")
        client = issue_leaf(client_ca_pair, "kube-apiserver", server=False, client=True)
        client_cert = (workdir / "client.crt", workdir / "client.key")
        write_pem(workdir / "client-ca.crt", client_ca_pair.cert_pem)
        write_pem(client_cert[0], client.cert_pem)
        write_pem(client_cert[1], client.key_pem, private=True)
        cmd += ["--client-ca-file", str(workdir / "client-ca.crt")]
    if client_deadline_seconds is not None:
        cmd += ["--client-deadline-seconds", str(client_deadline_seconds)]
    if health:
        cmd += ["--health-bind", f"127.0.0.1:{health_port}"]
    if cpu_list:
        cmd = ["taskset", "-c", cpu_list, *cmd]
    log_file = workdir / "webhook.log"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(_fresh_dir(workdir / "metrics"))}
    with log_file.open("wb") as log:
        process = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = RunningServer(
        process, port, ca_file, cert_file, key_file, log_file, client_cert, health_port if health else None
    )
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"webhook exited with {process.returncode}:\n{log_file.read_text()[-3000:]}")
        try:
            ready = server.get("/readyz")[0] == 200
        except OSError:  # not listening yet
            ready = False
        if ready:
            return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"webhook not ready after {ready_timeout}s:\n{log_file.read_text()[-3000:]}")


def tls_refusal(port: int, context: ssl.SSLContext) -> str:
    """How a TLS server on 127.0.0.1:`port` refused the client `context` makes (a handshake
    error, an alert read after the handshake, or a close); fails if it answered a request."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
        except (ssl.SSLError, ConnectionResetError) as e:
            return f"handshake: {e}"
        with tls:
            # TLS 1.3: the client's side of the handshake ends before the server has checked its
            # certificate; the server's alert arrives with the next read.
            try:
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                data = tls.recv(4096)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as e:
                return f"alert: {e}"
    if data:
        raise AssertionError(f"served without a valid client certificate: {data[:80]!r}")
    return "closed"


def _fresh_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for f in path.iterdir():
        f.unlink()
    return path
