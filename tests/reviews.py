"""AdmissionReview envelopes, and an in-process app whose caches are fed directly."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable
from typing import Any

from flask import Flask

from priogate.kube.cache import WatchCache
from webhook.app import create_app
from webhook.view import CacheReads, CacheView


def fed_cache(name: str, objects: Iterable[dict[str, Any]] = (), *, synced: bool = True) -> WatchCache:
    return WatchCache.static(name, list(objects) if synced else None)


def make_view(
    classes: Iterable[dict[str, Any]] = (),
    *,
    synced: bool = True,
    quotas: Iterable[dict[str, Any]] = (),
    podgroups: Iterable[dict[str, Any]] = (),
    pods: Iterable[dict[str, Any]] = (),
    ledgers: Iterable[dict[str, Any]] = (),
    namespaces: Iterable[dict[str, Any]] = (),
    ledger_store: Any = None,
) -> CacheView:
    caches = {
        "priorityclasses": fed_cache("priorityclasses", classes, synced=synced),
        "resourcequotas": fed_cache("resourcequotas", quotas, synced=synced),
        "podgroups": fed_cache("podgroups", podgroups, synced=synced),
        "pods": fed_cache("pods", pods, synced=synced),
        "ledgers": fed_cache("ledgers", ledgers, synced=synced),
        "namespaces": fed_cache("namespaces", namespaces, synced=synced),
    }
    from priogate.ledger.codec import covered_namespace, ledger_of
    from priogate.ledger.memory import MemoryLedgerStore

    view = CacheView(caches, ledger_store)
    if ledger_store is None:
        view.ledger_store = MemoryLedgerStore(lambda namespace: CacheReads(view, namespace))
    elif getattr(ledger_store, "reads", False) is None:
        ledger_store.reads = lambda namespace: CacheReads(view, namespace)
    if isinstance(view.ledger_store, MemoryLedgerStore):
        for obj in ledgers:  # the in-process ledger starts as the cached one
            view.ledger_store.ledgers.setdefault(covered_namespace(obj), ledger_of(obj))
    return view


def make_app(classes: Iterable[dict[str, Any]] = (), **kw: Any) -> Flask:
    return create_app(make_view(classes, **kw))


def review(
    obj: dict | None,
    *,
    operation: str = "CREATE",
    old: dict | None = None,
    resource: str = "pods",
    sub_resource: str = "",
    api_version: str = "admission.k8s.io/v1",
    dry_run: bool = False,
) -> dict:
    group, kind = ("", "Pod") if resource == "pods" else ("scheduling.k8s.io", "PriorityClass")
    target = obj or old or {}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "operation": operation,
        "name": target.get("metadata", {}).get("name", ""),
        "namespace": target.get("metadata", {}).get("namespace", ""),
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "userInfo": {"username": "admin"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


def decode_patch(response: dict) -> list[dict]:
    patch = response.get("patch")
    return json.loads(base64.b64decode(patch)) if patch else []


def group_review(
    obj: dict | None, *, operation: str = "CREATE", old: dict | None = None, dry_run: bool = False
) -> dict:
    body = review(obj, operation=operation, old=old, resource="pods", dry_run=dry_run)
    gvk = {"group": "scheduling.volcano.sh", "version": "v1beta1"}
    body["request"]["kind"] = {**gvk, "kind": "PodGroup"}
    body["request"]["resource"] = {**gvk, "resource": "podgroups"}
    return body
