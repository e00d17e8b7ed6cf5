"""manifests/ stays in step with the code, and kustomize can build it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from webhook.configuration import in_cluster_manifest
from webhook.registry import load_rule_sets

ROOT = Path(__file__).resolve().parents[2]


def test_webhook_configurations_match_the_registry():
    on_disk = (ROOT / "manifests" / "webhook-configurations.yaml").read_text()
    assert on_disk == in_cluster_manifest(), "run `make manifests` and commit the result"
    paths = {
        h["clientConfig"]["service"]["path"] for doc in yaml.safe_load_all(on_disk) for h in doc["webhooks"]
    }
    assert paths == {r.path for r in load_rule_sets()}


def test_kustomize_builds():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to check that `kubectl apply -k manifests/` would work")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "manifests")], capture_output=True, text=True, check=True
    )
    kinds = {doc["kind"] for doc in yaml.safe_load_all(out.stdout) if doc}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ClusterRole",
        "PodDisruptionBudget",
    } <= kinds
