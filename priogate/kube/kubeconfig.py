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


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    configuration = k8s.Configuration()
    if kubeconfig:
        if not Path(kubeconfig).expanduser().exists():
            raise KubeconfigError(f"stat {kubeconfig}: no such file or directory")
        config_file: str | None = kubeconfig
    else:
        files = _default_files()
        if not files:
            if os.environ.get("KUBERNETES_SERVICE_HOST"):
                return _in_cluster(configuration)
            raise KubeconfigError(
                "no kubeconfig found: pass --kubeconfig, set KUBECONFIG or create ~/.kube/config"
            )
        # Several files: the official client merges $KUBECONFIG's list itself when given none.
        config_file = files[0] if len(files) == 1 else None
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=config_file)
        name = context or (current or {}).get("name")
        chosen = next((c for c in contexts or [] if c.get("name") == name), None)
        if chosen is None:
            if context:
                raise KubeconfigError(f'context "{context}" does not exist')
            raise KubeconfigError("current-context is not set: pass --context")
        k8s_config.load_kube_config(
            config_file=config_file,
            context=name,
            client_configuration=configuration,
            persist_config=False,
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
