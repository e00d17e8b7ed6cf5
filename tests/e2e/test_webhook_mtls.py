"""Mutual TLS between kube-apiserver and the webhook, in the test run's control plane (the
launcher's default): kube-apiserver's calls are served, direct clients without kube-apiserver's
client certificate are refused at TLS. Every other e2e test admits through this same port."""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path

import pytest

from certs import issue_ca, issue_leaf, write_pem
from localcluster import LocalCluster
from tests.builders import pod
from tests.reviews import review
from tests.serving import tls_refusal


def client_context(cluster: LocalCluster, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_crt))
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def test_the_session_webhook_requires_client_certificates(cluster: LocalCluster):
    assert cluster.options.mtls and cluster.webhook_client_cert is not None
    webhook = cluster.supervisor.get("webhook")
    assert f"--client-ca-file={cluster.pki.webhook_client_ca_crt}" in webhook.argv


def test_kube_apiserver_calls_the_webhook_with_its_client_certificate(cluster: LocalCluster):
    """Every registered hook answers kube-apiserver's dry-run probes (its own request metric
    counts a successful call for each), on a port that refuses clients without a certificate."""
    assert cluster.webhooks is not None
    cluster.webhooks.probe(priority_plugin=cluster.mode.priority_plugin)


def test_a_direct_post_without_a_client_certificate_is_refused_at_tls(cluster: LocalCluster, tmp_path):
    port = cluster.ports.webhook
    without = tls_refusal(port, client_context(cluster, None))
    other_ca = issue_ca("not-the-webhook-client-ca")
    other = issue_leaf(other_ca, "kube-apiserver-webhook-client", server=False, client=True)
    foreign = (tmp_path / "other.crt", tmp_path / "other.key")
    write_pem(foreign[0], other.cert_pem)
    write_pem(foreign[1], other.key_pem, private=True)
    wrong_ca = tls_refusal(port, client_context(cluster, foreign))
    # The cluster CA signs the admin's client certificate: the webhook does not take it either.
    admin = tls_refusal(port, client_context(cluster, (cluster.pki.admin_crt, cluster.pki.admin_key)))
    for how in (without, wrong_ca, admin):
        assert how.startswith(("handshake:", "alert:", "closed")), how


@pytest.mark.parametrize("path", ["/mutate/pods", "/healthz"])
def test_with_kube_apiserver_s_client_certificate_a_direct_request_is_served(cluster: LocalCluster, path):
    context = client_context(cluster, cluster.webhook_client_cert)
    conn = http.client.HTTPSConnection("127.0.0.1", cluster.ports.webhook, context=context, timeout=10)
    try:
        if path == "/healthz":
            conn.request("GET", path)
        else:
            body = json.dumps(review(pod(namespace="team-a")))
            conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()[:200]
    finally:
        conn.close()


def test_the_health_port_serves_probes_and_metrics_without_a_client_certificate(cluster: LocalCluster):
    """With mTLS required on the webhook port, kubelet's probes and Prometheus (no client
    certificate) read /readyz and /metrics on the plain-HTTP health port (--health-bind): the
    metrics are the workers' own, counting kube-apiserver's calls."""
    assert cluster.ports.webhook_health
    webhook = cluster.supervisor.get("webhook")
    assert f"--health-bind=127.0.0.1:{cluster.ports.webhook_health}" in webhook.argv

    def get(path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", cluster.ports.webhook_health, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    assert get("/healthz") == (200, "ok\n")
    assert get("/readyz") == (200, "ok\n")
    status, metrics = get("/metrics")
    assert status == 200
    ready = [x for x in metrics.splitlines() if x.startswith("priogate_webhook_worker_ready{")]
    assert len(ready) == cluster.options.webhook_workers and all(x.endswith(" 1.0") for x in ready)
    answered = [x for x in metrics.splitlines() if x.startswith("priogate_webhook_requests_total{")]
    assert answered and sum(float(x.split()[-1]) for x in answered) > 0, "kube-apiserver's calls counted"
