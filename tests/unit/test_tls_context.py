"""The server's TLS context cache: rebuilt when the files change, kept when they are mid-rotation;
TLS 1.2 with AEAD suites only."""

from __future__ import annotations

import socket
import ssl
from types import SimpleNamespace

import pytest

from certs import issue_ca, issue_leaf, write_pem
from webhook.server import _ContextCache


def conf_for(directory, ca_certs: str | None = None) -> SimpleNamespace:
    """The gunicorn settings the cache reads."""
    return SimpleNamespace(
        certfile=str(directory / "tls.crt"), keyfile=str(directory / "tls.key"), ca_certs=ca_certs
    )


def test_rebuilds_on_change_and_keeps_serving_through_a_half_written_rotation(tmp_path):
    ca = issue_ca()
    first, second = (issue_leaf(ca, "priogate-test", dns_names=["localhost"]) for _ in range(2))
    conf = conf_for(tmp_path)
    write_pem(tmp_path / "tls.key", first.key_pem, private=True)
    write_pem(tmp_path / "tls.crt", first.cert_pem)
    builds: list[int] = []

    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(conf.certfile, conf.keyfile)
        builds.append(1)
        return context

    cache = _ContextCache()
    original = cache(conf, factory)
    assert cache(conf, factory) is original and len(builds) == 1, "unchanged files: no rebuild"
    assert original.minimum_version == ssl.TLSVersion.TLSv1_2

    write_pem(tmp_path / "tls.key", second.key_pem, private=True)  # the certificate is not there yet
    assert cache(conf, factory) is original, "a mismatched pair keeps the previous context"

    write_pem(tmp_path / "tls.crt", second.cert_pem)
    rotated = cache(conf, factory)
    assert rotated is not original and len(builds) == 2


def test_without_a_previous_context_a_bad_pair_is_an_error(tmp_path):
    ca = issue_ca()
    one, other = (issue_leaf(ca, "priogate-test") for _ in range(2))
    write_pem(tmp_path / "tls.crt", one.cert_pem)
    write_pem(tmp_path / "tls.key", other.key_pem, private=True)
    conf = conf_for(tmp_path)

    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(conf.certfile, conf.keyfile)
        return context

    with pytest.raises(ssl.SSLError):
        _ContextCache()(conf, factory)


def test_tls_1_2_offers_ecdhe_with_aead_ciphers_only(tmp_path):
    ca = issue_ca()
    leaf = issue_leaf(ca, "priogate-test")
    write_pem(tmp_path / "tls.crt", leaf.cert_pem)
    write_pem(tmp_path / "tls.key", leaf.key_pem, private=True)
    conf = conf_for(tmp_path)

    def factory() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(conf.certfile, conf.keyfile)
        return context

    ciphers = _ContextCache()(conf, factory).get_ciphers()
    tls12 = [c for c in ciphers if c["protocol"] == "TLSv1.2"]
    assert tls12, "TLS 1.2 stays available (older API servers, FIPS builds)"
    assert all(c["aead"] and c["kea"] == "kx-ecdhe" for c in tls12), [c["name"] for c in tls12]
    assert {c["name"] for c in ciphers if c["protocol"] == "TLSv1.3"} >= {"TLS_AES_128_GCM_SHA256"}


def test_a_changed_client_ca_bundle_rebuilds_the_context(tmp_path):
    ca = issue_ca()
    leaf = issue_leaf(ca, "priogate-test")
    write_pem(tmp_path / "tls.crt", leaf.cert_pem)
    write_pem(tmp_path / "tls.key", leaf.key_pem, private=True)
    write_pem(tmp_path / "client-ca.crt", issue_ca("client-ca-1").cert_pem)
    conf = conf_for(tmp_path, ca_certs=str(tmp_path / "client-ca.crt"))

    def factory() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=conf.ca_certs)
        context.load_cert_chain(conf.certfile, conf.keyfile)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    cache = _ContextCache()
    first = cache(conf, factory)
    assert cache(conf, factory) is first
    write_pem(tmp_path / "client-ca.crt", issue_ca("client-ca-2").cert_pem)
    second = cache(conf, factory)
    assert second is not first
    assert [c["subject"] for c in second.get_ca_certs()] == [((("commonName", "client-ca-2"),),)]


def test_sockets_block_for_the_deadline_at_most_and_do_not_wait_once_shut(tmp_path):
    """gthread makes a client's socket blocking with setblocking(True); here that blocks for the
    client deadline per call, and a socket gunicorn has shut for closing reads without waiting."""
    ca = issue_ca()
    leaf = issue_leaf(ca, "priogate-test")
    write_pem(tmp_path / "tls.crt", leaf.cert_pem)
    write_pem(tmp_path / "tls.key", leaf.key_pem, private=True)
    conf = conf_for(tmp_path)

    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(conf.certfile, conf.keyfile)
        return context

    context = _ContextCache(deadline_seconds=3.5)(conf, factory)
    server_end, client_end = socket.socketpair()
    with client_end, context.wrap_socket(server_end, server_side=True, do_handshake_on_connect=False) as tls:
        assert tls.gettimeout() == 3.5, "a blocking accepted socket starts with the deadline"
        tls.setblocking(False)
        assert tls.gettimeout() == 0.0
        tls.setblocking(True)
        assert tls.gettimeout() == 3.5
        tls.settimeout(None)
        assert tls.gettimeout() == 3.5
        tls.settimeout(1.0)
        assert tls.gettimeout() == 1.0
        tls.shutdown(socket.SHUT_WR)
        tls.settimeout(2.0)  # what gunicorn.util.close_graceful sets before it drains
        assert tls.gettimeout() == 0.0
        client_end.sendall(b"late")
        assert tls.recv(4096) == b"late", "what has arrived is still drained"
        with pytest.raises(BlockingIOError):
            tls.recv(4096)
