"""Typed access to the objects inside an AdmissionReview.

kube-apiserver only sends decoded, defaulted objects, but the webhook's endpoint is reachable
by anything, so rule sets read fields through these helpers: a wrong shape becomes a
MalformedObject (answered as a 400 denial naming the field), never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.review import AdmissionRequest


class MalformedObject(ValueError):
    pass


def new_object(request: AdmissionRequest) -> Mapping[str, Any]:
    if request.object is None:
        raise MalformedObject(f"request.object is required for {request.operation}")
    return request.object


def old_object(request: AdmissionRequest) -> Mapping[str, Any]:
    if request.old_object is None:
        raise MalformedObject(f"request.oldObject is required for {request.operation}")
    return request.old_object


def mapping(obj: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObject(f"{where}.{key} must be an object")
    return value


def optional_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise MalformedObject(f"{where}.{key} must be a string")
    return value


def optional_int(obj: Mapping[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise MalformedObject(f"{where}.{key} must be an integer")
    return value


def object_name(obj: Mapping[str, Any], where: str = "object") -> str:
    meta = mapping(obj, "metadata", where)
    return optional_str(meta, "name", f"{where}.metadata") or ""


def check_containers(spec: Mapping[str, Any], where: str) -> None:
    """containers and initContainers are lists of objects whose resources are maps of maps."""
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise MalformedObject(f"{where}.{key} must be a list")
        for i, container in enumerate(items):
            if not isinstance(container, Mapping):
                raise MalformedObject(f"{where}.{key}[{i}] must be an object")
            resources = mapping(container, "resources", f"{where}.{key}[{i}]")
            for part in ("requests", "limits"):
                mapping(resources, part, f"{where}.{key}[{i}].resources")
    for key in ("overhead", "resources"):
        mapping(spec, key, where)
