"""Every certificate and key of the local control plane, issued with the project's `certs` package,
the admin kubeconfig, and the kubeconfig kube-apiserver authenticates to the webhook with."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs import KeyPair, issue_ca, issue_leaf, write_pem

ADMIN_USER = "priogate-admin"
# The controller's identity, as the webhook's podgroup-annotations rule expects it by default
# (webhook/rules/podgroup_annotations.py): the username of its ServiceAccount in manifests/.
# In system:masters so it has every right locally, as the manifests' ClusterRole gives it.
CONTROLLER_USER = "system:serviceaccount:priogate-system:priogate-controller"
CLUSTER_NAME = "priogate-local"
# The real node's name (localcluster/node.py) and the `kubernetes` Service's ClusterIP, the first
# address of components.SERVICE_CIDR (kube-apiserver allocates it so).
NODE_NAME = "real-node-0"
KUBERNETES_SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def controller_crt(self) -> Path:
        return self.dir / "controller.crt"

    @property
    def controller_key(self) -> Path:
        return self.dir / "controller.key"

    @property
    def webhook_client_ca_crt(self) -> Path:
        """The CA the webhook trusts for client certificates (--client-ca-file): its own, not the
        cluster CA, which signs every user's and component's client certificate."""
        return self.dir / "webhook-client-ca.crt"

    @property
    def webhook_client_ca_key(self) -> Path:
        return self.dir / "webhook-client-ca.key"

    @property
    def webhook_client_crt(self) -> Path:
        """kube-apiserver's client certificate for the webhook; the launcher's own checks of the
        webhook present it too."""
        return self.dir / "webhook-client.crt"

    @property
    def webhook_client_key(self) -> Path:
        return self.dir / "webhook-client.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    @property
    def node_crt(self) -> Path:
        """The real node's kubelet (localcluster/node.py): system:node:<name>, in system:nodes."""
        return self.dir / "node.crt"

    @property
    def node_key(self) -> Path:
        return self.dir / "node.key"

    @property
    def webhook_crt(self) -> Path:
        return self.dir / "webhook.crt"

    @property
    def webhook_key(self) -> Path:
        return self.dir / "webhook.key"

    def ca_pem(self) -> bytes:
        return self.ca_crt.read_bytes()


def issue_all(directory: Path) -> Pki:
    """A fresh CA and everything signed by it. Fresh on every start: nothing outlives a cluster."""
    pki = Pki(directory)
    ca = issue_ca("priogate-local-ca")
    write_pem(pki.ca_crt, ca.cert_pem)
    write_pem(pki.ca_key, ca.key_pem, private=True)
    loopback = {"dns_names": ["localhost"], "ip_addresses": ["127.0.0.1"]}
    # Pods of the real node reach kube-apiserver as the `kubernetes` Service (its ClusterIP, the
    # first address of the service range, is what kubelet puts in KUBERNETES_SERVICE_HOST).
    apiserver_names = {
        "dns_names": ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
        "ip_addresses": ["127.0.0.1", KUBERNETES_SERVICE_IP],
    }
    _write(pki.apiserver_crt, pki.apiserver_key, issue_leaf(ca, "kube-apiserver", **apiserver_names))
    # system:masters as well: RBAC is the only authorizer here (no Node authorizer), and the
    # system:node ClusterRole is bound to no one since Kubernetes 1.8.
    node = issue_leaf(
        ca,
        f"system:node:{NODE_NAME}",
        organizations=["system:nodes", "system:masters"],
        server=False,
        client=True,
    )
    _write(pki.node_crt, pki.node_key, node)
    admin = issue_leaf(ca, ADMIN_USER, organizations=["system:masters"], server=False, client=True)
    _write(pki.admin_crt, pki.admin_key, admin)
    controller = issue_leaf(ca, CONTROLLER_USER, organizations=["system:masters"], server=False, client=True)
    _write(pki.controller_crt, pki.controller_key, controller)
    # For clients too, as certs.bootstrap issues it: relaying replicas present it to each other.
    webhook = issue_leaf(ca, "priogate-webhook", **loopback, client=True)
    _write(pki.webhook_crt, pki.webhook_key, webhook)
    client_ca = issue_ca("priogate-webhook-client-ca")
    _write(pki.webhook_client_ca_crt, pki.webhook_client_ca_key, client_ca)
    client = issue_leaf(client_ca, "kube-apiserver-webhook-client", server=False, client=True)
    _write(pki.webhook_client_crt, pki.webhook_client_key, client)
    sa = ec.generate_private_key(ec.SECP256R1())
    write_pem(
        pki.sa_key,
        sa.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        private=True,
    )
    write_pem(
        pki.sa_pub,
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return pki


def _write(crt: Path, key: Path, pair: KeyPair) -> None:
    write_pem(crt, pair.cert_pem)
    write_pem(key, pair.key_pem, private=True)


def write_kubeconfig(
    path: Path,
    server: str,
    pki: Pki,
    user: str = ADMIN_USER,
    crt: Path | None = None,
    key: Path | None = None,
) -> None:
    """A self-contained kubeconfig (data embedded), usable from any directory: the admin's, or
    another client certificate's."""
    crt, key = crt or pki.admin_crt, key or pki.admin_key

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_crt)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(crt), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
        "preferences": {},
    }
    write_pem(path, yaml.safe_dump(config, sort_keys=False).encode(), private=True)


def write_webhook_kubeconfig(path: Path, webhook_host: str, pki: Pki) -> None:
    """The kubeconfig named by the WebhookAdmissionConfiguration (kubeConfigFile): kube-apiserver
    presents the `users` entry whose name matches the webhook's host, here `127.0.0.1:PORT` as
    the webhook URL gives it (in a cluster, the Service's DNS name, e.g.
    priogate-webhook.priogate-system.svc:8444). "*" is the fallback for any other host; the
    e2e replica proxies listen on ports chosen after kube-apiserver has read this file.
    https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#authenticate-apiservers
    """
    user = {
        "client-certificate": str(pki.webhook_client_crt),
        "client-key": str(pki.webhook_client_key),
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{"name": webhook_host, "user": user}, {"name": "*", "user": user}],
    }
    write_pem(path, yaml.safe_dump(config, sort_keys=False).encode(), private=True)
