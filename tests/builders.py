"""Builders for test objects and an in-process app whose caches are fed directly."""

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
    ledger_store: Any = None,
) -> CacheView:
    caches = {
        "priorityclasses": fed_cache("priorityclasses", classes, synced=synced),
        "resourcequotas": fed_cache("resourcequotas", quotas, synced=synced),
        "podgroups": fed_cache("podgroups", podgroups, synced=synced),
        "pods": fed_cache("pods", pods, synced=synced),
        "ledgers": fed_cache("ledgers", ledgers, synced=synced),
    }
    from priogate.ledger import MemoryLedgerStore, covered_namespace, record_of

    view = CacheView(caches, ledger_store)
    if ledger_store is None:
        view.ledger_store = MemoryLedgerStore(lambda namespace: CacheReads(view, namespace))
    elif getattr(ledger_store, "reads", False) is None:
        ledger_store.reads = lambda namespace: CacheReads(view, namespace)
    if isinstance(view.ledger_store, MemoryLedgerStore):
        for obj in ledgers:  # the in-process record starts as the cached one
            view.ledger_store.records.setdefault(covered_namespace(obj), record_of(obj))
    return view


def make_app(classes: Iterable[dict[str, Any]] = (), **kw: Any) -> Flask:
    return create_app(make_view(classes, **kw))


def priority_class(
    name: str, value: int, *, default: bool = False, policy: str | None = "PreemptLowerPriority"
) -> dict:
    pc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }
    if policy is not None:
        pc["preemptionPolicy"] = policy
    return pc


SYSTEM_CLASSES = [
    priority_class("system-node-critical", 2000001000),
    priority_class("system-cluster-critical", 2000000000),
]


def pod(name: str = "p", namespace: str = "team-a", **spec: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], **spec},
    }


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


def podgroup(name: str, namespace: str = "team-a", uid: str | None = None, **spec: Any) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": spec,
    }


def resource_quota(
    name: str, hard: dict, used: dict | None = None, namespace: str = "team-a", **spec: Any
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard, **spec},
        "status": {"hard": hard, "used": used or {}},
    }


def group_review(
    obj: dict | None, *, operation: str = "CREATE", old: dict | None = None, dry_run: bool = False
) -> dict:
    body = review(obj, operation=operation, old=old, resource="pods", dry_run=dry_run)
    gvk = {"group": "scheduling.volcano.sh", "version": "v1beta1"}
    body["request"]["kind"] = {**gvk, "kind": "PodGroup"}
    body["request"]["resource"] = {**gvk, "resource": "podgroups"}
    return body


def ledger(namespace: str = "team-a", **groups: dict) -> dict:
    """A namespace's reservation record (a ConfigMap in priogate-system) holding one entry per
    keyword: group name -> minResources (the uid is "uid-<group>", minMember 1)."""
    from priogate.ledger import DEFAULT_LEDGER_NAMESPACE, Entry, Record, record_object

    entries = {
        f"uid-{g}": Entry(g, f"uid-{g}", res, 1, "", "2026-11-22T00:00:00Z") for g, res in groups.items()
    }
    return record_object(DEFAULT_LEDGER_NAMESPACE, namespace, Record(entries), None)
