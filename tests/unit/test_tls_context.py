"""The server's TLS context cache: rebuilt when the files change, kept when they are mid-rotation."""

from __future__ import annotations

import ssl
from types import SimpleNamespace

import pytest

from certs import issue_ca, issue_leaf, write_pem
from webhook.server import _ContextCache


def test_rebuilds_on_change_and_keeps_serving_through_a_half_written_rotation(tmp_path):
    ca = issue_ca()
    first, second = (issue_leaf(ca, "priogate-test", dns_names=["localhost"]) for _ in range(2))
    conf = SimpleNamespace(certfile=str(tmp_path / "tls.crt"), keyfile=str(tmp_path / "tls.key"))
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
    conf = SimpleNamespace(certfile=str(tmp_path / "tls.crt"), keyfile=str(tmp_path / "tls.key"))

    def factory() -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(conf.certfile, conf.keyfile)
        return context

    with pytest.raises(ssl.SSLError):
        _ContextCache()(conf, factory)
