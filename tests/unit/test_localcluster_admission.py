"""The local control plane's one AdmissionConfiguration: a mode's plugins (ResourceQuota) and the
webhook plugins' client-certificate kubeconfig, merged, in the shape kube-apiserver reads."""

from __future__ import annotations

import pytest
import yaml

from localcluster.components import WEBHOOK_PLUGINS, admission_configuration
from localcluster.pki import issue_all, write_webhook_kubeconfig

RESOURCE_QUOTA = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AdmissionConfiguration",
    "plugins": [
        {
            "name": "ResourceQuota",
            "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "ResourceQuotaConfiguration",
                "limitedResources": [{"resource": "pods", "matchScopes": []}],
            },
        }
    ],
}


def test_the_webhook_kubeconfig_is_merged_into_the_modes_configuration(tmp_path):
    base = tmp_path / "admission.yaml"
    base.write_text(yaml.safe_dump(RESOURCE_QUOTA))
    merged = admission_configuration(base, tmp_path / "webhook.kubeconfig")
    assert merged is not None
    assert merged["kind"] == "AdmissionConfiguration"
    assert merged["plugins"][0] == RESOURCE_QUOTA["plugins"][0]
    webhook = {p["name"]: p["configuration"] for p in merged["plugins"][1:]}
    assert set(webhook) == set(WEBHOOK_PLUGINS)
    for configuration in webhook.values():
        assert configuration == {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(tmp_path / "webhook.kubeconfig"),
        }


def test_nothing_to_configure_is_no_file_and_a_mode_alone_is_kept(tmp_path):
    assert admission_configuration(None, None) is None
    base = tmp_path / "admission.yaml"
    base.write_text(yaml.safe_dump(RESOURCE_QUOTA))
    assert admission_configuration(base, None) == RESOURCE_QUOTA


def test_a_mode_that_configures_the_webhook_plugins_itself_is_refused(tmp_path):
    base = tmp_path / "admission.yaml"
    own = {"name": "ValidatingAdmissionWebhook", "configuration": {}}
    base.write_text(yaml.safe_dump({**RESOURCE_QUOTA, "plugins": [own]}))
    with pytest.raises(ValueError, match="ValidatingAdmissionWebhook"):
        admission_configuration(base, tmp_path / "webhook.kubeconfig")


def test_the_webhook_kubeconfig_names_the_webhook_host(tmp_path):
    pki = issue_all(tmp_path / "pki")
    path = tmp_path / "webhook.kubeconfig"
    write_webhook_kubeconfig(path, "127.0.0.1:8443", pki)
    config = yaml.safe_load(path.read_text())
    users = {u["name"]: u["user"] for u in config["users"]}
    assert list(users) == ["127.0.0.1:8443", "*"]
    assert users["127.0.0.1:8443"] == {
        "client-certificate": str(pki.webhook_client_crt),
        "client-key": str(pki.webhook_client_key),
    }
    assert path.stat().st_mode & 0o077 == 0, "it names a private key: owner-only"
