"""The real server's edge: TLS suites."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator

import pytest

from tests.builders import SYSTEM_CLASSES, priority_class
from tests.serving import RunningServer, start_server

CLASSES = [*SYSTEM_CLASSES, priority_class("high", 1000)]


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
