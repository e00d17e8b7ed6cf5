"""The real server's edge: TLS suites, clients that stall before or inside their request, and
mutual TLS."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from certs import KeyPair, issue_ca, issue_leaf, write_pem
from tests.builders import SYSTEM_CLASSES, pod, priority_class
from tests.reviews import review
from tests.serving import RunningServer, start_server, tls_refusal

CLASSES = [*SYSTEM_CLASSES, priority_class("high", value=1000)]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("edge"), CLASSES, workers=1)
    yield srv
    assert srv.stop() == 0


def tls12_client(server: RunningServer, ciphers: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(server.ca_file)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    return context


def handshake(server: RunningServer, context: ssl.SSLContext) -> tuple[str | None, str]:
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cipher = tls.cipher()
        assert cipher is not None
        return tls.version(), cipher[0]


def test_a_tls_1_2_client_offering_only_cbc_suites_is_refused(server):
    cbc = "ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA384:ECDHE-ECDSA-AES128-SHA"
    context = tls12_client(server, cbc)
    offered = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert offered and not any(c["aead"] for c in offered), "the client must offer CBC suites only"
    with pytest.raises(ssl.SSLError):
        handshake(server, context)


def test_aead_clients_are_served_over_tls_1_2_and_1_3(server):
    for suite in ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"):
        assert handshake(server, tls12_client(server, suite)) == ("TLSv1.2", suite)
    assert handshake(server, server.ssl_context())[0] == "TLSv1.3"


def post_review(conn: http.client.HTTPSConnection) -> dict:
    conn.request(
        "POST",
        "/mutate/pods",
        json.dumps(review(pod(namespace="team-a", priority_class="high"))),
        {"Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    assert resp.status == 200
    return json.loads(resp.read())["response"]


def test_stalled_clients_hold_up_nobody_and_a_stalled_body_is_answered_408(tmp_path):
    """One worker with 2 threads. A client that stalls in its TLS handshake or its request head
    costs the event loop a coroutine, not a thread, so 36 of them leave /healthz and a real
    admission answering at once; a body that stops coming is answered 408 at the deadline
    (webhook/asgi.py)."""
    deadline = 3.0
    srv = start_server(tmp_path, CLASSES, workers=1, threads=2, client_deadline_seconds=deadline)
    stalled: list[socket.socket] = []
    try:
        for _ in range(32):  # one byte of a TLS record header, then nothing
            raw = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            raw.sendall(b"\x16")
            stalled.append(raw)
        for _ in range(4):  # a finished handshake, then one byte of the request head
            tls = srv.ssl_context().wrap_socket(
                socket.create_connection(("127.0.0.1", srv.port), timeout=5), server_hostname="127.0.0.1"
            )
            tls.sendall(b"P")
            stalled.append(tls)
        time.sleep(0.3)  # let the worker take them all in

        for _ in range(3):
            started = time.monotonic()
            conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=srv.ssl_context(), timeout=1)
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b"ok\n"
            assert post_review(conn)["allowed"] is True
            assert time.monotonic() - started < 1.0
            conn.close()

        # A head that is all there, then a body that never comes: 408 at the deadline.
        body_staller = srv.ssl_context().wrap_socket(
            socket.create_connection(("127.0.0.1", srv.port), timeout=deadline + 5),
            server_hostname="127.0.0.1",
        )
        body_staller.sendall(
            b"POST /mutate/pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n"
        )
        body_sent = time.monotonic()
        stalled.append(body_staller)
        answer = body_staller.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert deadline - 0.5 <= time.monotonic() - body_sent < deadline + 2.0, "the body got the deadline"
        assert srv.get("/healthz")[0] == 200
        status, text = srv.get("/metrics")
        assert status == 200
        timeouts = next(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("priogate_webhook_client_timeouts_total ")
        )
        assert timeouts == 1
        assert "Traceback" not in srv.log_file.read_text()
    finally:
        for s in stalled:
            s.close()
        assert srv.stop() == 0


def test_clients_that_do_not_close_after_their_last_response_do_not_stop_the_worker(tmp_path):
    """Clients that take a "Connection: close" answer and never close their end: the worker's
    event loop goes on answering everyone else."""
    srv = start_server(tmp_path, CLASSES, workers=1, threads=2)
    lingering: list[ssl.SSLSocket] = []
    try:
        for _ in range(8):
            tls = srv.ssl_context().wrap_socket(
                socket.create_connection(("127.0.0.1", srv.port), timeout=5), server_hostname="127.0.0.1"
            )
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert tls.recv(4096).startswith(b"HTTP/1.1 200")
            lingering.append(tls)  # and never closed
        started = time.monotonic()
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=srv.ssl_context(), timeout=1)
        assert post_review(conn)["allowed"] is True
        assert time.monotonic() - started < 1.0
        conn.close()
    finally:
        for s in lingering:
            s.close()
        assert srv.stop() == 0


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory) -> Iterator[RunningServer]:
    srv = start_server(tmp_path_factory.mktemp("mtls"), CLASSES, workers=1, client_ca=True)
    yield srv
    assert srv.stop() == 0


def test_with_a_client_ca_a_client_certificate_signed_by_it_is_served(mtls_server):
    assert mtls_server.get("/healthz") == (200, "ok\n")
    conn = http.client.HTTPSConnection(
        "127.0.0.1", mtls_server.port, context=mtls_server.ssl_context(), timeout=5
    )
    assert post_review(conn)["allowed"] is True
    conn.close()


def _issue_pair(directory: Path, name: str, ca: KeyPair) -> tuple[Path, Path]:
    leaf = issue_leaf(ca, name, ip_addresses=["127.0.0.1"], client=True)
    pair = (directory / f"{name}.crt", directory / f"{name}.key")
    write_pem(pair[0], leaf.cert_pem)
    write_pem(pair[1], leaf.key_pem, private=True)
    return pair


def test_with_a_client_ca_the_servers_own_certificate_is_a_client_but_not_its_siblings(mtls_server, tmp_path):
    """Replicas relay ledger admissions to each other presenting the serving certificate
    (webhook/ledger_relay.py): that leaf is trusted as a client, not what its CA signs."""
    version = ssl.TLSVersion.TLSv1_2  # a refusal is then reported inside the handshake
    own = (mtls_server.cert_file, mtls_server.key_file)
    conn = http.client.HTTPSConnection(
        "127.0.0.1", mtls_server.port, context=client_context(mtls_server, version, own), timeout=5
    )
    assert post_review(conn)["allowed"] is True
    conn.close()
    serving_ca = KeyPair(
        mtls_server.ca_file.read_bytes(), mtls_server.ca_file.with_name("ca.key").read_bytes()
    )
    sibling = _issue_pair(tmp_path, "sibling", serving_ca)
    refusal = tls_refusal(mtls_server.port, client_context(mtls_server, version, sibling))
    assert refusal.startswith("handshake:"), refusal


def test_with_a_client_ca_a_rotated_serving_certificate_is_a_client_at_once(tmp_path_factory, tmp_path):
    srv = start_server(tmp_path_factory.mktemp("mtls-rotation"), CLASSES, workers=1, client_ca=True)
    try:
        renewed = _issue_pair(
            tmp_path,
            "renewed",
            KeyPair(srv.ca_file.read_bytes(), srv.ca_file.with_name("ca.key").read_bytes()),
        )
        write_pem(srv.key_file, renewed[1].read_bytes(), private=True)
        write_pem(srv.cert_file, renewed[0].read_bytes())
        context = client_context(srv, ssl.TLSVersion.TLSv1_2, renewed)
        # The worker loads changed files into its context once a second (webhook/asgi.py).
        deadline = time.monotonic() + 5
        while True:
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=context, timeout=5)
                assert post_review(conn)["allowed"] is True
                conn.close()
                break
            except OSError:  # refused at TLS: not trusted yet
                assert time.monotonic() < deadline, "the renewed certificate was not trusted as a client"
                time.sleep(0.2)
    finally:
        assert srv.stop() == 0


def client_context(
    server: RunningServer, version: ssl.TLSVersion, cert: tuple[Path, Path] | None = None
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(server.ca_file))
    context.minimum_version = context.maximum_version = version
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["1.2", "1.3"])
def test_with_a_client_ca_other_clients_are_refused_at_tls(mtls_server, tmp_path, version):
    other_ca = issue_ca("some-other-ca")
    other = issue_leaf(other_ca, "kube-apiserver", server=False, client=True)
    foreign = (tmp_path / "other.crt", tmp_path / "other.key")
    write_pem(foreign[0], other.cert_pem)
    write_pem(foreign[1], other.key_pem, private=True)
    without = tls_refusal(mtls_server.port, client_context(mtls_server, version))
    wrong_ca = tls_refusal(mtls_server.port, client_context(mtls_server, version, foreign))
    if version is ssl.TLSVersion.TLSv1_2:
        # Refused inside the handshake. asyncio's TLS closes on a failed handshake without
        # always sending its alert first, so the client may read an EOF instead of the reason.
        for refusal, alert in ((without, "handshake failure"), (wrong_ca, "unknown ca")):
            assert refusal.startswith("handshake:") and (alert in refusal or "EOF" in refusal), refusal
    # TLS 1.3: the server's alert (certificate required, unknown ca), or, when its close overtakes
    # the client's request, an EOF or a reset; tls_refusal has checked that no response came.
