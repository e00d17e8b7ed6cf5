"""The routing label's backstop: a namespace whose label `priogate.io/default-priority-class`
disagrees with its annotation of the same key (priogate.namespace_default) is put in step.

With the built-in Priority plugin kept, kube-apiserver sends a namespace's pods to the namespace
default hook only while the namespace carries the label. The label hook on Namespace writes
(webhook/rules/namespace_default_label.py) keeps the two in step in every write it sees; this
catches what it could not see: namespaces annotated before priogate was installed or while its
configuration was absent, and labels changed by hand around it. Found from the controller's
namespace cache (each Namespace event, and every resync), one merge PATCH each, guarded by the
namespace's resourceVersion: a 409 means a newer write, whose own event looks again; a 404 a
namespace gone. Until then that namespace's pods get the globalDefault (docs/priorityclass-policy.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from controller.caches import Caches
from priogate import namespace_default
from priogate.kube.client import ApiClient, ApiError, resource_path

log = structlog.get_logger("priogate.controller.namespace_default")

CALL_TIMEOUT = (3, 5)


class DefaultClassLabeller:
    def __init__(self, client: ApiClient, caches: Caches) -> None:
        self.client = client
        self.caches = caches

    def out_of_step(self) -> list[str]:
        """The cached namespaces whose label disagrees with their annotation."""
        if self.caches.namespaces is None:
            return []
        return [
            ns["metadata"]["name"]
            for ns in self.caches.namespaces.items()
            if namespace_default.label_out_of_step(ns)
        ]

    def sync(self, name: str) -> bool:
        """Put the namespace's label in step if the cache shows it out of step; whether it
        wrote. Raises ApiError (the work queue retries the key) for anything but 404 and 409."""
        if self.caches.namespaces is None:
            return False
        namespace: Mapping[str, Any] | None = self.caches.namespaces.get("", name)
        if namespace is None or not namespace_default.label_out_of_step(namespace):
            return False  # gone, not seen yet (its ADDED event enqueues it), or in step
        try:
            self.client.request(
                "PATCH",
                resource_path("v1", "namespaces", None, name),
                body=namespace_default.label_merge_patch(namespace),
                content_type="application/merge-patch+json",
                timeout=CALL_TIMEOUT,
            )
        except ApiError as e:
            if e.status in (404, 409):
                return False
            raise
        log.info(
            "namespace's default-class label disagreed with its annotation; put in step",
            namespace=name,
            label=namespace_default.LABEL,
            value=namespace_default.wanted_label(namespace),
        )
        return True
