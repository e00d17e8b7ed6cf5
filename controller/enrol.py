"""The enrolment label's backstop: a namespace that holds a reservation but lacks the label
(priogate.scope) is labelled again, so kube-apiserver sends its pods to the pod quota hook.

The guarantee does not rest on this: the enrolment hook (webhook/rules/podgroup_enrolment.py)
labels a namespace, and proves kube-apiserver routes it, before its first reservation is
admitted. Two cases escape it: namespaces that reserved before the label existed (an upgrade),
and a label a cluster admin removed by hand. Both are found from the controller's caches (a
Namespace event, a ledger or PodGroup event, or the periodic ledger sweep enqueues the
namespace) and cost one PATCH each; until then that namespace's plain pods are not checked
against its reservations. docs/install.md, "Upgrading", labels the first case before the upgrade.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import structlog

from controller.caches import Caches
from priogate.kube.client import ApiClient, ApiError
from priogate.kube.namespaces import label_namespace
from priogate.ledger.codec import ledger_name, ledger_of
from priogate.ledger.model import DamagedLedger
from priogate.scope import ENROLLED_LABEL, claim_of, needs_enrolment

log = structlog.get_logger("priogate.controller.enrol")

PATCH_SECONDS = 10.0


class Enroller:
    def __init__(self, client: ApiClient, caches: Caches, ledger_namespace: str) -> None:
        self.client = client
        self.caches = caches
        self.ledger_namespace = ledger_namespace

    def claims(self, namespace: str) -> list[tuple[Mapping[str, Any], int]]:
        """What the caches show the namespace reserves, as (minResources, minMember): its
        ledger's entries and its stored PodGroups (a damaged ledger shows only the latter)."""
        out = [claim_of(g.get("spec") or {}) for g in self.caches.podgroups.namespace(namespace).values()]
        cached = self.caches.ledgers.get(self.ledger_namespace, ledger_name(namespace))
        try:
            ledger = ledger_of(cached) if cached is not None else None
        except DamagedLedger:
            ledger = None  # the stored groups above still count; the sweep rebuilds the ledger
        if ledger is not None:
            out += [(e.min_resources, e.min_member) for e in ledger.entries.values()]
        return out

    def enrol(self, namespace: str) -> bool:
        """Label the namespace if it needs it; whether it did. Raises ApiError (the work queue
        retries the key) when the PATCH fails, except for a namespace that is gone."""
        if self.caches.namespaces is None:
            return False
        obj = self.caches.namespaces.get("", namespace)
        if obj is None:
            return False  # gone, or not seen yet: its ADDED event enqueues it again
        labels = obj["metadata"].get("labels") or {}
        if not needs_enrolment(labels, self.claims(namespace)):
            return False
        try:
            label_namespace(self.client, namespace, deadline=time.monotonic() + PATCH_SECONDS)
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        log.info(
            "namespace holds reservations but lacked the enrolment label; labelled",
            namespace=namespace,
            label=ENROLLED_LABEL,
        )
        return True
