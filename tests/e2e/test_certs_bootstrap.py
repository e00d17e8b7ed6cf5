"""The in-cluster certificate bootstrap against a real API server: one CA however many replicas
race, files written, caBundle injected, the CA kept across renewals; a bootstrap that may not
create the Secret waits for it."""

from __future__ import annotations

import base64
import datetime as dt
import threading
import time

import pytest
from cryptography import x509

from certs.bootstrap import (
    SecretMissing,
    bootstrap,
    dns_names_of,
    ensure_secret,
    inject_ca_bundle,
    refresh_files,
    write_files,
)
from certs.issue import KeyPair, expires_within, has_client_auth, issue_leaf
from priogate.kube.client import load_client
from tests.e2e.helpers import inert_webhook_configuration

CONFIG = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def test_bootstrap_creates_one_secret_and_injects_the_ca(cluster, namespace, tmp_path):
    client = load_client(str(cluster.kubeconfig))
    name = f"{namespace}-certs"
    client.create(CONFIG, inert_webhook_configuration(name, namespace))
    try:
        outs = [tmp_path / f"replica-{i}" for i in range(4)]
        threads = [
            threading.Thread(target=bootstrap, args=(client, namespace, "tls", "priogate-webhook", out, name))
            for out in outs
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cas = {(out / "ca.crt").read_bytes() for out in outs}
        assert len(cas) == 1, "racing replicas must end up with one CA"
        ca_pem = cas.pop()
        config = client.get(f"{CONFIG}/{name}")
        assert base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]) == ca_pem
        leaf = KeyPair((outs[0] / "tls.crt").read_bytes(), (outs[0] / "tls.key").read_bytes())
        san = leaf.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = san.get_values_for_type(x509.DNSName)
        assert f"priogate-webhook.{namespace}.svc" in sans
        assert has_client_auth(leaf.cert_pem), "replicas present it to relay (webhook/ledger_relay.py)"
        again_ca, _ = ensure_secret(client, namespace, "tls", [f"priogate-webhook.{namespace}.svc"])
        assert again_ca.cert_pem == ca_pem
    finally:
        client.delete(f"{CONFIG}/{name}")


def test_a_running_server_renews_a_due_certificate_from_the_secret(cluster, namespace, tmp_path):
    client = load_client(str(cluster.kubeconfig))
    names = [f"priogate-webhook.{namespace}.svc", "priogate-webhook"]
    ca, _ = ensure_secret(client, namespace, "tls", names)
    # Put a leaf that expires in 10 days (inside the 30-day renewal margin) into the Secret and
    # the served files, as if the pod had been running for most of a year.
    due = issue_leaf(ca, "priogate-webhook", dns_names=names, days=10)
    path = f"/api/v1/namespaces/{namespace}/secrets/tls"
    secret = client.get(path)
    secret["data"].update({"tls.crt": _b64(due.cert_pem), "tls.key": _b64(due.key_pem)})
    client.replace(path, secret)

    outs = [tmp_path / f"pod-{i}" for i in range(3)]
    for out in outs:
        write_files(out, ca, due)
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda o=o: results.append(refresh_files(client, namespace, "tls", o)))
        for o in outs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True, True, True]
    served = {(out / "tls.crt").read_bytes() for out in outs}
    assert len(served) == 1, "racing replicas must converge on one renewed certificate"
    renewed = KeyPair(served.pop(), (outs[0] / "tls.key").read_bytes())
    assert not expires_within(renewed.cert_pem, dt.timedelta(days=30))
    assert renewed.certificate.serial_number != due.certificate.serial_number
    assert (outs[0] / "ca.crt").read_bytes() == ca.cert_pem, "the CA (and so the caBundle) stays"
    assert set(dns_names_of(renewed.cert_pem)) == set(names)
    assert base64.b64decode(client.get(path)["data"]["tls.crt"]) == renewed.cert_pem
    assert refresh_files(client, namespace, "tls", outs[0]) is False, "nothing due: nothing written"


def test_a_serving_certificate_that_cannot_authenticate_relays_is_renewed(cluster, namespace, tmp_path):
    """Issued by an earlier version, for serving only: renewed though far from due, so that
    replicas can present it to each other."""
    client = load_client(str(cluster.kubeconfig))
    names = [f"priogate-webhook.{namespace}.svc"]
    ca, _ = ensure_secret(client, namespace, "tls", names)
    serving_only = issue_leaf(ca, "priogate-webhook", dns_names=names)
    assert not has_client_auth(serving_only.cert_pem)
    path = f"/api/v1/namespaces/{namespace}/secrets/tls"
    secret = client.get(path)
    secret["data"].update({"tls.crt": _b64(serving_only.cert_pem), "tls.key": _b64(serving_only.key_pem)})
    client.replace(path, secret)
    write_files(tmp_path, ca, serving_only)
    assert refresh_files(client, namespace, "tls", tmp_path) is True
    renewed = (tmp_path / "tls.crt").read_bytes()
    assert has_client_auth(renewed) and base64.b64decode(client.get(path)["data"]["tls.crt"]) == renewed
    assert (tmp_path / "ca.crt").read_bytes() == ca.cert_pem


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_without_create_the_bootstrap_waits_for_the_secret(cluster, namespace, tmp_path):
    client = load_client(str(cluster.kubeconfig))
    with pytest.raises(SecretMissing):
        bootstrap(
            client, namespace, "tls", "priogate-webhook", tmp_path, "x", create_secret=False, inject=False
        )
    waiter = threading.Thread(
        target=bootstrap,
        args=(client, namespace, "tls", "priogate-webhook", tmp_path / "waited", "x"),
        kwargs={"create_secret": False, "inject": False, "wait_seconds": 30},
    )
    waiter.start()
    time.sleep(1)
    assert waiter.is_alive(), "it waits"
    ca, _ = ensure_secret(client, namespace, "tls", [f"priogate-webhook.{namespace}.svc"])
    waiter.join(30)
    assert not waiter.is_alive()
    assert (tmp_path / "waited" / "ca.crt").read_bytes() == ca.cert_pem


def test_injecting_with_no_configuration_is_an_error(cluster, namespace):
    client = load_client(str(cluster.kubeconfig))
    with pytest.raises(LookupError, match="no webhook configuration"):
        inject_ca_bundle(client, f"{namespace}-absent", b"-----BEGIN CERTIFICATE-----")
