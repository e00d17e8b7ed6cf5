"""In-cluster certificate bootstrap.

1. Get the serving Secret, or create it (CA + serving certificate for the Service's DNS names).
   Racing creators: the loser of the 409 reads the winner's, so all serve one CA.
2. Renew the serving certificate when it is due, keeping the CA (so the caBundle stays valid).
3. Write the PEM files for the server container (an emptyDir), and/or put the CA into every
   webhook of the priogate Mutating/ValidatingWebhookConfigurations that lacks it.

manifests/ splits it by privilege: the one-shot Job priogate-cabundle (its own ServiceAccount)
creates the Secret and injects the caBundle; the webhook pod's init container only waits for the
Secret and writes the files, so the serving pods cannot change webhook configurations.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from pathlib import Path

import structlog
from cryptography import x509

from certs.files import write_pem
from certs.issue import KeyPair, expires_within, has_client_auth, issue_ca, issue_leaf
from priogate.kube.client import ApiClient, ApiError

log = structlog.get_logger("priogate.certs")
RENEW_BEFORE = dt.timedelta(days=30)
# Names go into the SANs; a CN is limited to 64 characters, which a service DNS name can exceed.
COMMON_NAME = "priogate-webhook"
CONFIG_PATHS = (
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _secret_body(namespace: str, name: str, ca: KeyPair, leaf: KeyPair, version: str | None = None) -> dict:
    meta: dict = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "priogate"}}
    if version:
        meta["resourceVersion"] = version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "kubernetes.io/tls",
        "data": {
            "ca.crt": _b64(ca.cert_pem),
            "ca.key": _b64(ca.key_pem),
            "tls.crt": _b64(leaf.cert_pem),
            "tls.key": _b64(leaf.key_pem),
        },
    }


def _serving_leaf(ca: KeyPair, dns_names: list[str]) -> KeyPair:
    """The serving certificate. It authenticates clients too: a quota server relaying a ledger
    admission to another replica presents it, and a server that requires client certificates
    trusts it beside kube-apiserver's CA (webhook/ledger_relay.py). One issued without clientAuth
    is renewed at once."""
    return issue_leaf(ca, COMMON_NAME, dns_names=dns_names, client=True)


class SecretMissing(LookupError):
    pass


def ensure_secret(
    client: ApiClient, namespace: str, name: str, dns_names: list[str], *, create: bool = True
) -> tuple[KeyPair, KeyPair]:
    """The Secret's CA and serving certificate, renewed when due. `create`: issue both and create
    the Secret when there is none; otherwise its absence is SecretMissing (a new CA here would
    not be in the webhook configurations' caBundle)."""
    path = f"/api/v1/namespaces/{namespace}/secrets"
    for _ in range(5):
        try:
            secret = client.get(f"{path}/{name}")
        except ApiError as e:
            if e.status != 404:
                raise
            if not create:
                raise SecretMissing(
                    f"secret {namespace}/{name} does not exist; `python -m certs bootstrap` creates it"
                    " (manifests/: the priogate-cabundle Job)"
                ) from None
            ca = issue_ca("priogate-webhook-ca")
            leaf = _serving_leaf(ca, dns_names)
            try:
                client.create(path, _secret_body(namespace, name, ca, leaf))
                log.info("created serving secret", secret=name)
                return ca, leaf
            except ApiError as conflict:
                if conflict.status != 409:
                    raise
                continue  # another replica created it first: use theirs
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        ca = KeyPair(data["ca.crt"], data["ca.key"])
        leaf = KeyPair(data["tls.crt"], data["tls.key"])
        if not expires_within(leaf.cert_pem, RENEW_BEFORE) and has_client_auth(leaf.cert_pem):
            return ca, leaf
        leaf = _serving_leaf(ca, dns_names)
        try:
            client.replace(
                f"{path}/{name}",
                _secret_body(namespace, name, ca, leaf, secret["metadata"]["resourceVersion"]),
            )
            log.info("renewed serving certificate", secret=name)
            return ca, leaf
        except ApiError as conflict:
            if conflict.status != 409:
                raise
    raise RuntimeError(f"secret {namespace}/{name} kept changing; retry the bootstrap")


def inject_ca_bundle(client: ApiClient, config_name: str, ca_pem: bytes) -> int:
    """Set caBundle on every webhook of the named configurations; returns how many changed.
    Neither configuration there is an error (LookupError): nothing would trust the CA."""
    bundle = _b64(ca_pem)
    changed = 0
    found = 0
    for collection in CONFIG_PATHS:
        for _ in range(5):
            try:
                config = client.get(f"{collection}/{config_name}")
            except ApiError as e:
                if e.status == 404:
                    break  # not installed (e.g. validating only); nothing to inject
                raise
            found += 1
            hooks = [h for h in config.get("webhooks") or [] if h["clientConfig"].get("caBundle") != bundle]
            if not hooks:
                break
            for hook in hooks:
                hook["clientConfig"]["caBundle"] = bundle
            try:
                client.replace(f"{collection}/{config_name}", config)
                changed += len(hooks)
                break
            except ApiError as e:
                if e.status != 409:
                    raise
    if not found:
        raise LookupError(f"no webhook configuration named {config_name} (yet) to put the CA into")
    return changed


def bootstrap(
    client: ApiClient,
    namespace: str,
    secret: str,
    service: str,
    out: Path | None,
    config_name: str,
    *,
    create_secret: bool = True,
    inject: bool = True,
    wait_seconds: float = 0.0,
) -> None:
    """`out`: write the PEM files there. `create_secret`: create the Secret if missing; without,
    wait up to `wait_seconds` for it. `inject`: put the CA into the webhook configurations."""
    dns_names = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local", service]
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            ca, leaf = ensure_secret(client, namespace, secret, dns_names, create=create_secret)
            break
        except SecretMissing:
            if time.monotonic() >= deadline:
                raise
            log.info("waiting for the serving secret", secret=f"{namespace}/{secret}")
            time.sleep(2.0)
    if out is not None:
        write_files(out, ca, leaf)
    changed = inject_ca_bundle(client, config_name, ca.cert_pem) if inject else None
    log.info("certificates ready", out=str(out) if out else None, ca_bundle_injected=changed)


def write_files(out: Path, ca: KeyPair, leaf: KeyPair) -> None:
    # Key before certificate: the server reloads when either changes, and a reload that meets a
    # new key with the old certificate keeps serving the previous context (webhook/server.py).
    write_pem(out / "ca.crt", ca.cert_pem)
    write_pem(out / "tls.key", leaf.key_pem, private=True)
    write_pem(out / "tls.crt", leaf.cert_pem)


def refresh_files(client: ApiClient, namespace: str, secret: str, out: Path) -> bool:
    """Renew the Secret's serving certificate when it is due (for the names the served one has),
    and bring the PEM files in `out` up to date with the Secret. True when the files changed.
    A running server calls this periodically, so a certificate never expires under it."""
    served = (out / "tls.crt").read_bytes()
    # Never create: a new CA here would not be in the webhook configurations' caBundle (and the
    # servers' ServiceAccount may not create Secrets, manifests/rbac.yaml).
    ca, leaf = ensure_secret(client, namespace, secret, dns_names_of(served), create=False)
    if leaf.cert_pem == served:
        return False
    write_files(out, ca, leaf)
    log.info("serving certificate refreshed from the secret", secret=f"{namespace}/{secret}", out=str(out))
    return True


def dns_names_of(cert_pem: bytes) -> list[str]:
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return sans.get_values_for_type(x509.DNSName)
