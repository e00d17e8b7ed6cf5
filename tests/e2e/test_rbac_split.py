"""manifests/rbac.yaml against a real API server: the certificate steps, each run as its own
ServiceAccount, can do their part and no more. The caBundle Job creates the serving Secret and
injects the CA; the webhook pod (init container and servers) can only read and renew that one
Secret, and cannot touch a webhook configuration. The webhook pod may list what a PriorityClass
delete checks, and write none of it.

The rules are the shipped ones, moved into the test's namespace and pointed at a webhook
configuration of the test's own (the test run's `priogate` configurations stay untouched)."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from certs.bootstrap import SecretMissing, bootstrap, ensure_secret, inject_ca_bundle
from localcluster import LocalCluster
from localcluster.binaries import REPO
from priogate.kube.class_users import ListingFailed, class_uses, list_namespaces
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from tests.builders import workload
from tests.e2e.helpers import inert_webhook_configuration, wait_for

RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
ACCOUNTS = ("priogate-webhook", "priogate-cabundle")
SECRET = "priogate-webhook-tls"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def shipped_rbac(namespace: str, config_name: str) -> list[dict]:
    """The two accounts' RBAC from `kubectl kustomize manifests/`, in `namespace`, with
    cluster-scoped names suffixed and the webhook configuration name replaced."""
    out = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "manifests")], capture_output=True, text=True, check=True
    ).stdout
    docs = []
    for doc in yaml.safe_load_all(out):
        if not doc or doc["kind"] not in RBAC_KINDS:
            continue
        name = doc["metadata"]["name"]
        role_name = doc.get("roleRef", {}).get("name", name)
        if name not in ACCOUNTS and role_name not in ACCOUNTS and not name.startswith(ACCOUNTS):
            continue
        if doc["kind"].startswith("Cluster"):
            doc["metadata"]["name"] = f"{name}-{namespace}"
        else:
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        for rule in doc.get("rules", []):
            if rule.get("resourceNames") == ["priogate"]:
                rule["resourceNames"] = [config_name]
        docs.append(doc)
    return docs


def as_account(cluster: LocalCluster, namespace: str, account: str) -> ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    api = k8s.ApiClient(configuration)
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{account}")
    return ApiClient(api)


@pytest.fixture
def installed(cluster: LocalCluster, kubectl, namespace: str) -> Iterator[str]:
    admin = load_client(str(cluster.kubeconfig))
    config_name = f"{namespace}-hooks"
    admin.create(CONFIGS, inert_webhook_configuration(config_name, namespace))
    docs = shipped_rbac(namespace, config_name)
    assert {d["kind"] for d in docs} == set(RBAC_KINDS)
    kubectl.apply(docs)
    try:
        yield config_name
    finally:
        admin.delete(f"{CONFIGS}/{config_name}")
        for doc in docs:
            if doc["kind"].startswith("Cluster"):
                kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found")


def forbidden(call) -> bool:
    try:
        call()
    except ApiError as e:
        return e.status == 403
    return False


def test_the_job_and_the_webhook_pod_each_do_their_part_and_no_more(
    cluster: LocalCluster, namespace: str, installed: str, tmp_path: Path
):
    config_name = installed
    pod = as_account(cluster, namespace, "priogate-webhook")
    job = as_account(cluster, namespace, "priogate-cabundle")
    names = [f"priogate-webhook.{namespace}.svc"]
    secret_path = f"/api/v1/namespaces/{namespace}/secrets"

    # The pod first, as on a fresh install: no Secret yet, and it may not make one.
    early = tmp_path / "early"
    with pytest.raises(SecretMissing):
        bootstrap(
            pod, namespace, SECRET, "priogate-webhook", early, config_name, create_secret=False, inject=False
        )
    assert forbidden(lambda: ensure_secret(pod, namespace, SECRET, names))
    assert forbidden(lambda: inject_ca_bundle(pod, config_name, b"not a CA"))

    # The Job: creates the Secret and injects its CA.
    bootstrap(job, namespace, SECRET, "priogate-webhook", None, config_name)
    ca_pem = base64.b64decode(job.get(f"{secret_path}/{SECRET}")["data"]["ca.crt"])
    injected = job.get(f"{CONFIGS}/{config_name}")["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(injected) == ca_pem

    # Then the pod's init container gets the files, and the servers may renew in place.
    out = tmp_path / "tls"
    bootstrap(pod, namespace, SECRET, "priogate-webhook", out, config_name, create_secret=False, inject=False)
    assert (out / "ca.crt").read_bytes() == ca_pem
    secret = pod.get(f"{secret_path}/{SECRET}")
    pod.replace(f"{secret_path}/{SECRET}", secret)  # update, by name

    # And nothing else: no other Secret, no other webhook configuration, no Secret elsewhere.
    admin = load_client(str(cluster.kubeconfig))
    admin.create(secret_path, {"metadata": {"name": "other"}, "stringData": {"k": "v"}})
    assert forbidden(lambda: pod.get(f"{secret_path}/other"))
    assert forbidden(lambda: job.get(f"{secret_path}/other"))
    assert forbidden(lambda: pod.get(f"{CONFIGS}/{config_name}"))
    assert forbidden(lambda: job.get(f"{CONFIGS}/priogate"))
    assert forbidden(lambda: job.create("/api/v1/namespaces/default/secrets", {"metadata": {"name": "x"}}))


def test_the_webhook_pod_may_list_what_a_priorityclass_delete_checks_and_write_none_of_it(
    cluster: LocalCluster, namespace: str, installed: str
):
    """Safe deletes (docs/priorityclass-policy.md): every kind the check lists, and the
    namespaces, are listed by the webhook's shipped rules without a refusal; none is written."""
    pod = as_account(cluster, namespace, "priogate-webhook")

    def lists_all() -> bool:
        try:
            class_uses(pod, "no-such-class", deadline=time.monotonic() + 8)
            list_namespaces(pod, deadline=time.monotonic() + 8)
        except ListingFailed:
            return False  # RBAC's caches lag the shipped rules' apply by a moment
        return True

    wait_for(lists_all, 30, "the webhook's ServiceAccount lists every kind a delete checks")
    assert forbidden(
        lambda: pod.create(
            resource_path("apps/v1", "deployments", namespace), workload("Deployment", "d", namespace=None)
        )
    )
    assert forbidden(lambda: pod.delete(resource_path("v1", "namespaces", name=namespace)))
