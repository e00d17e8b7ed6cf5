"""The PodGroup model (Volcano's scheduling.volcano.sh/v1beta1 schema) and pod membership."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUP_VERSION = "scheduling.volcano.sh/v1beta1"
PLURAL = "podgroups"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # Volcano's pod-to-PodGroup link
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins' link, accepted too
DEFAULT_QUEUE = "default"
DEFAULT_MIN_MEMBER = 1

PHASES = ("Pending", "Inqueue", "Running", "Unknown", "Completed", "Failed")
TERMINAL_POD_PHASES = ("Succeeded", "Failed")


def group_of(pod: Mapping[str, Any]) -> str:
    """The name of the PodGroup a pod belongs to, or "" (annotation first, then label)."""
    meta = _mapping(pod.get("metadata"))
    name = _mapping(meta.get("annotations")).get(GROUP_ANNOTATION) or _mapping(meta.get("labels")).get(
        GROUP_LABEL
    )
    return name if isinstance(name, str) else ""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES
