"""`python -m certs uninstall`: remove what priogate's programs created in their own namespace,
which no installer owns (the chart's post-delete hook runs it; docs/install.md, "Uninstalling").

`helm uninstall` deletes the release's objects only. Left behind otherwise:

* the serving Secret priogate-webhook-tls (the certificate Job creates it, the servers renew it);
* the ledgers (ConfigMaps labelled priogate.io/ledger=podgroup-ledger, one per
  tenant namespace; the webhook and the controller write them);
* the controller's Lease;
* the PriorityClass table (a release object, but a controller still stopping may write it again).

It first waits until the webhook and controller pods are gone, so that nothing still running
writes a ledger or renews the Lease after it was deleted. Each object is deleted by name or by
the label only priogate's own objects carry; a 404 is success (already gone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from priogate.kube.client import ApiError, resource_path
from priogate.ledger.codec import LEDGER_LABEL
from priogate.priority_table import TABLE_NAME

SECRET = "priogate-webhook-tls"
LEASE = "priogate-controller"
PODS_SELECTOR = "app.kubernetes.io/name=priogate,app.kubernetes.io/component in (webhook,controller)"


class Client(Protocol):
    def get(self, path: str, **kw: object) -> dict: ...
    def delete(self, path: str) -> dict: ...


def running_pods(client: Client, namespace: str) -> list[str]:
    path = resource_path("v1", "pods", namespace)
    items = client.get(path, query=[("labelSelector", PODS_SELECTOR)])["items"]
    return [p["metadata"]["name"] for p in items]


def targets(client: Client, namespace: str, secret: str = SECRET, lease: str = LEASE) -> list[str]:
    """The paths to delete: the Secret (unless `secret` is empty: the admin's own), the Lease,
    the table and every ledger."""
    ledgers = client.get(
        resource_path("v1", "configmaps", namespace), query=[("labelSelector", "=".join(LEDGER_LABEL))]
    )["items"]
    return [
        *([resource_path("v1", "secrets", namespace, secret)] if secret else []),
        resource_path("coordination.k8s.io/v1", "leases", namespace, lease),
        resource_path("v1", "configmaps", namespace, TABLE_NAME),
        *(resource_path("v1", "configmaps", namespace, r["metadata"]["name"]) for r in ledgers),
    ]


def uninstall(
    client: Client,
    namespace: str,
    *,
    wait_seconds: float = 120.0,
    secret: str = SECRET,
    lease: str = LEASE,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Delete what priogate left in `namespace`; returns the paths deleted (not already gone)."""
    deadline = time.monotonic() + wait_seconds
    while pods := running_pods(client, namespace):
        if time.monotonic() > deadline:
            say(f"still running after {wait_seconds:.0f} s, deleting anyway: {', '.join(pods)}")
            break
        sleep(1.0)
    deleted = []
    for path in targets(client, namespace, secret, lease):
        try:
            client.delete(path)
        except ApiError as e:
            if e.status != 404:
                raise
            continue
        deleted.append(path)
        say(f"deleted {path}")
    return deleted
