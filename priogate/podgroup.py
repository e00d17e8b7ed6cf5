"""The PodGroup vocabulary (Volcano's scheduling.volcano.sh/v1beta1 schema): the pod-to-group
link, the PodGroup phases and the pod phases that decide membership. Every module reads these
names here."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

GROUP_VERSION = "scheduling.volcano.sh/v1beta1"
PLURAL = "podgroups"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # Volcano's pod-to-PodGroup link
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins' link, accepted too
DEFAULT_QUEUE = "default"
DEFAULT_MIN_MEMBER = 1


class Phase(StrEnum):
    """status.phase of a PodGroup (Volcano's PodGroupPhase). A StrEnum, so a member equals the
    plain string read from the API server."""

    PENDING = "Pending"
    INQUEUE = "Inqueue"
    RUNNING = "Running"
    UNKNOWN = "Unknown"
    COMPLETED = "Completed"
    FAILED = "Failed"


# Tuples, not sets: `in` then also answers (False) for an unhashable phase in a malformed object.
HOLDING_PHASES = (Phase.INQUEUE, Phase.RUNNING, Phase.UNKNOWN)  # admitted and not finished
FINISHED_PHASES = (Phase.COMPLETED, Phase.FAILED)


class PodPhase(StrEnum):
    """status.phase of a Pod (core/v1 PodPhase)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL_POD_PHASES = (PodPhase.SUCCEEDED, PodPhase.FAILED)


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
