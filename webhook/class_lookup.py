"""A pod's or PodGroup's PriorityClass, resolved from the cache, and read once more from the API
server before it is called missing.

The priority hooks answer from a watch cache, which hears of a PriorityClass a few milliseconds
after it is stored: a class created a moment before the object that names it would be refused
as missing, as kube-apiserver's own Priority plugin refuses it from its informer
(plugin/pkg/admission/priority admission.go: the lister's NotFound). A quorum GET of that one
class settles it; it is made only for a name the cache lacks, so its cost falls on requests
that are refused anyway.
"""

from __future__ import annotations

from typing import Any

import structlog

from priogate import namespace_default, priority
from priogate.kube.client import ApiError
from priogate.priority_table import MARKER_ANNOTATION
from webhook.objects import mapping
from webhook.registry import ClusterView
from webhook.review import escape_pointer

log = structlog.get_logger("priogate.priority")


def resolve(class_name: str | None, view: ClusterView) -> priority.Resolution:
    """priority.resolve over the cached classes; ClassNotFound only when the API server does
    not hold the class either."""
    try:
        return priority.resolve(class_name, view.priority_classes(), view.default_priority_class())
    except priority.ClassNotFound as missing:
        try:
            stored = view.stored_priority_class(class_name or "")
        except (ApiError, OSError) as e:
            log.warning(
                "PriorityClass could not be read; missing as the cache says", name=class_name, error=str(e)
            )
            raise missing from None
        if stored is None:
            raise
        return priority.resolve(class_name, {class_name or "": stored}, view.default_priority_class())


def resolve_in(class_name: str | None, namespace: str, view: ClusterView) -> priority.Resolution:
    """resolve, with the namespace's default class (priogate.namespace_default) for an object
    that names none. A default the cache lacks is read once more, as a named class is."""
    default = None if class_name else view.namespace_default_class(namespace)
    if not default:
        return resolve(class_name, view)
    try:
        resolution = resolve(default, view)
    except priority.ClassNotFound:
        raise namespace_default.DefaultClassNotFound(default, namespace) from None
    return priority.Resolution(resolution.priority, resolution.preemption_policy, default, defaulted=True)


def unmark(obj: Any) -> list[dict[str, Any]]:
    """The patch that removes the mark an in-process policy left (webhook/priority_policy.py)
    on an object it left to a hook: resolved now, the mark must not be stored."""
    annotations = mapping(mapping(obj, "metadata", "object"), "annotations", "object.metadata")
    if MARKER_ANNOTATION not in annotations:
        return []
    return [{"op": "remove", "path": "/metadata/annotations/" + escape_pointer(MARKER_ANNOTATION)}]
