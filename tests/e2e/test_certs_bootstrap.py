"""The in-cluster certificate bootstrap against a real API server: one CA however many replicas
race, files written, caBundle injected, the CA kept across renewals."""

from __future__ import annotations

import base64
import threading

from cryptography import x509

from certs.bootstrap import bootstrap, ensure_secret
from certs.issue import KeyPair
from priogate.kube.client import load_client

CONFIG = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def test_bootstrap_creates_one_secret_and_injects_the_ca(cluster, namespace, tmp_path):
    client = load_client(str(cluster.kubeconfig))
    name = f"{namespace}-certs"
    client.create(
        CONFIG,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "unused.priogate.io",
                    "clientConfig": {
                        "service": {"namespace": namespace, "name": "priogate-webhook", "path": "/x"}
                    },
                    "rules": [
                        {
                            "apiGroups": ["example.invalid"],
                            "apiVersions": ["v1"],
                            "resources": ["nothing"],
                            "operations": ["CREATE"],
                        }
                    ],
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Ignore",
                }
            ],
        },
    )
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
        again_ca, _ = ensure_secret(client, namespace, "tls", [f"priogate-webhook.{namespace}.svc"])
        assert again_ca.cert_pem == ca_pem
    finally:
        client.delete(f"{CONFIG}/{name}")
