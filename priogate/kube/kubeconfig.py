"""A client for a person at a terminal, found the way kubectl finds one.

The servers use `load_client` (a kubeconfig path, else in-cluster). A command-line tool follows
kubectl instead: `--kubeconfig`, else $KUBECONFIG (a colon-separated list of files, merged), else
~/.kube/config; `--context` picks a context, else the current one; and the context's namespace
is the default namespace ("default" when it names none). In a pod with no kubeconfig at all it
falls back to the service account, as kubectl does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KubeConfigMerger

from priogate.kube.client import ApiClient

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class KubeconfigError(Exception):
    """The kubeconfig cannot be used (missing file or context, no current context)."""


@dataclass(frozen=True)
class Connection:
    client: ApiClient
    namespace: str  # the context's namespace, else "default"


def _default_files() -> list[str]:
    env = os.environ.get("KUBECONFIG", "")
    files = [f for f in env.split(os.pathsep) if f] if env else [str(Path.home() / ".kube" / "config")]
    return [f for f in files if Path(f).expanduser().exists()]


def connect(
    kubeconfig: str | None = None, context: str | None = None, *, as_user: str | None = None
) -> Connection:
    """`as_user`: act as this user (kubectl's --as: the Impersonate-User header)."""
    connection = _connect(kubeconfig, context)
    if as_user:
        connection.client.set_default_header("Impersonate-User", as_user)
    return connection


def _connect(kubeconfig: str | None, context: str | None) -> Connection:
    configuration = k8s.Configuration()
    if kubeconfig:
        if not Path(kubeconfig).expanduser().exists():
            raise KubeconfigError(f"stat {kubeconfig}: no such file or directory")
        files = [kubeconfig]
    else:
        files = _default_files()
        if not files:
            if os.environ.get("KUBERNETES_SERVICE_HOST"):
                return _in_cluster(configuration)
            raise KubeconfigError(
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config"
            )
    # The official client merges a colon-separated list of files as kubectl does (first wins).
    paths = os.pathsep.join(files)
    try:
        merged = KubeConfigMerger(paths).config.value or {}
        name = context or merged.get("current-context")
        if not name:
            raise KubeconfigError("current-context is not set: pass --context")
        # The merger wraps nested entries in its ConfigNode; .value is the plain dict.
        contexts = [getattr(c, "value", c) for c in merged.get("contexts") or []]
        chosen = next((c for c in contexts if c.get("name") == name), None)
        if chosen is None:
            raise KubeconfigError(f'context "{name}" does not exist')
        k8s_config.load_kube_config(
            config_file=paths, context=name, client_configuration=configuration, persist_config=False
        )
    except ConfigException as e:
        raise KubeconfigError(str(e)) from None
    namespace = (chosen.get("context") or {}).get("namespace") or "default"
    return Connection(ApiClient(k8s.ApiClient(configuration)), namespace)


def _in_cluster(configuration: k8s.Configuration) -> Connection:
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except ConfigException as e:
        raise KubeconfigError(str(e)) from None
    try:
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        namespace = "default"
    return Connection(ApiClient(k8s.ApiClient(configuration)), namespace)
