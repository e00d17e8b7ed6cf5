"""The real server: gunicorn worker processes over TLS, keep-alive, certificate hot reload, metrics across
workers, graceful shutdown."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time

import pytest
from cryptography import x509

from certs import issue_ca, issue_leaf, write_pem
from tests.builders import SYSTEM_CLASSES, pod, priority_class
from tests.reviews import review
from tests.serving import start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(
        tmp_path_factory.mktemp("server"), [*SYSTEM_CLASSES, priority_class("high", value=1000)]
    )
    yield srv
    assert srv.stop() == 0, "graceful shutdown should exit 0"


def post(conn: http.client.HTTPSConnection, body: dict) -> dict:
    conn.request("POST", "/mutate/pods", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    return json.loads(resp.read())["response"]


def test_admissions_over_one_keepalive_connection(server):
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.ssl_context(), timeout=5)
    for _ in range(20):
        answer = post(conn, review(pod(namespace="team-a", priority_class="high")))
        assert answer["allowed"] is True
    denied = post(conn, review(pod(namespace="team-a", priority_class="missing")))
    assert (
        denied["status"]["message"] == 'pods "p" is forbidden: no PriorityClass with name missing was found'
    )
    conn.close()


def test_chunked_body_and_oversized_body(server):
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.ssl_context(), timeout=5)
    body = json.dumps(review(pod(namespace="team-a", priority_class="high"))).encode()
    chunks = iter([body[:1000], body[1000:]])  # an iterable body is sent with chunked encoding
    conn.request("POST", "/mutate/pods", chunks, {"Content-Type": "application/json"}, encode_chunked=True)
    resp = conn.getresponse()
    assert resp.status == 200
    assert json.loads(resp.read())["response"]["allowed"] is True
    # Refused from the Content-Length alone, before any of the body is sent or read.
    conn.putrequest("POST", "/mutate/pods")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(4 * 1024 * 1024))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413
    assert b"body larger than" in resp.read()
    conn.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_tls_below_1_2_is_refused(server):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_ciphers("DEFAULT@SECLEVEL=0")  # let the client offer TLS 1.1 at all
    context.load_verify_locations(server.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="127.0.0.1")


def served_serial(server) -> int:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        context = ssl.create_default_context(cafile=str(server.ca_file))
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def test_rotated_certificate_is_served_without_restart(server, tmp_path):
    before = served_serial(server)
    # A new CA too: the client trusts both during the overlap, as a caBundle would.
    ca = issue_ca("rotated-ca")
    leaf = issue_leaf(ca, "rotated", ip_addresses=["127.0.0.1"])
    bundle = server.ca_file.read_bytes() + ca.cert_pem
    write_pem(server.key_file, leaf.key_pem, private=True)
    write_pem(server.cert_file, leaf.cert_pem)
    write_pem(server.ca_file, bundle)
    # Each worker loads changed files into its context once a second (webhook/asgi.py).
    deadline = time.monotonic() + 5
    while (after := served_serial(server)) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert after == leaf.certificate.serial_number
    # Every worker serves it (the server has two): no connection gets the old one any more.
    time.sleep(1.5)
    assert {served_serial(server) for _ in range(10)} == {leaf.certificate.serial_number}


def test_metrics_aggregate_workers(server):
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=server.ssl_context(), timeout=5)
    post(conn, review(pod(namespace="team-a")))
    status, text = server.get("/metrics")
    assert status == 200
    assert "priogate_webhook_requests_total" in text
    assert "priogate_webhook_latency_seconds_bucket" in text
    assert "priogate_webhook_requests_in_flight" in text
    expiry = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("priogate_tls_certificate_expiry_timestamp_seconds ")
    )
    not_after = x509.load_pem_x509_certificate(server.cert_file.read_bytes()).not_valid_after_utc
    # every worker's certificate (the test above rotates it) was issued within a minute of this one
    assert abs(expiry - not_after.timestamp()) < 120


def test_a_server_answers_only_its_rule_sets(tmp_path):
    srv = start_server(
        tmp_path, [*SYSTEM_CLASSES, priority_class("high", value=1000)], workers=1, serve="priority"
    )
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=srv.ssl_context(), timeout=5)
        assert post(conn, review(pod(namespace="team-a", priority_class="high")))["allowed"] is True
        conn.request("POST", "/validate/podgroups", "{}", {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 404
        assert "/mutate/pods" in resp.read().decode()
        assert srv.get("/readyz")[0] == 200
        conn.close()
    finally:
        assert srv.stop() == 0
