"""The server's TLS context: the certificate reloaded into the same context when the files change
(gunicorn's asyncio worker keeps the context it was given), kept when they are mid-rotation;
TLS 1.2 with AEAD suites only."""

from __future__ import annotations

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


def presented(context: ssl.SSLContext) -> bytes:
    """The certificate (DER) a handshake with the server context gets, over memory BIOs."""
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname = False
    client_context.verify_mode = ssl.CERT_NONE
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, to_server)
    server = context.wrap_bio(to_server, to_client, server_side=True)
    for _ in range(10):
        done = 0
        for end in (client, server):
            try:
                end.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
        if done == 2:
            return client.getpeercert(binary_form=True)
    raise AssertionError("no handshake")


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


def test_reloads_in_place_on_change_and_keeps_serving_through_a_half_written_rotation(tmp_path):
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
    context = cache(conf, factory)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert presented(context) == der(first.cert_pem)

    write_pem(tmp_path / "tls.key", second.key_pem, private=True)  # the certificate is not there yet
    cache.refresh()
    assert presented(context) == der(first.cert_pem), "a mismatched pair keeps the previous certificate"

    write_pem(tmp_path / "tls.crt", second.cert_pem)
    cache.refresh()
    assert presented(context) == der(second.cert_pem), "the same context presents the new certificate"
    assert cache(conf, factory) is context and builds == [1], "built once, changed in place"


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


def test_a_changed_client_ca_bundle_adds_its_cas_to_the_context(tmp_path):
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
    context = cache(conf, factory)
    write_pem(tmp_path / "client-ca.crt", issue_ca("client-ca-2").cert_pem)
    cache.refresh()
    # Trusted from the next handshake; the one taken out stays until a restart (OpenSSL can add
    # trust anchors to a context, not remove them).
    subjects = [c["subject"] for c in context.get_ca_certs()]
    assert subjects == [((("commonName", "client-ca-1"),),), ((("commonName", "client-ca-2"),),)]
