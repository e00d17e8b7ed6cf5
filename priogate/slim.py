"""What the controller keeps of pods and nodes in its caches (WatchCache transforms).

Whole objects carry much the controller never reads: managedFields, container env, probes,
volumes, per-container statuses, a node's image list. Dropping those keeps the caches of a large
cluster small. The list is of fields known to be unread (the preemption engine, the phase and
enqueue functions), so anything new the engine comes to read is kept by default; a test checks
that every acceptance scenario decides the same on slimmed objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNREAD_CONTAINER_FIELDS = frozenset(
    {
        "env",
        "envFrom",
        "command",
        "args",
        "livenessProbe",
        "readinessProbe",
        "startupProbe",
        "lifecycle",
        "volumeMounts",
        "volumeDevices",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "workingDir",
    }
)
UNREAD_POD_STATUS = frozenset({"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"})
UNREAD_NODE_STATUS = frozenset({"images", "volumesAttached", "volumesInUse", "config"})


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}


def slim_pod(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "volumes"}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [
                {k: v for k, v in c.items() if k not in UNREAD_CONTAINER_FIELDS}
                if isinstance(c, Mapping)
                else c
                for c in spec[key]
            ]
    status = {k: v for k, v in (pod.get("status") or {}).items() if k not in UNREAD_POD_STATUS}
    return {**pod, "metadata": _meta(pod), "spec": spec, "status": status}


def slim_node(node: Mapping[str, Any]) -> Mapping[str, Any]:
    status = {k: v for k, v in (node.get("status") or {}).items() if k not in UNREAD_NODE_STATUS}
    return {**node, "metadata": _meta(node), "status": status}
