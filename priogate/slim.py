"""What each program's caches keep of pods and nodes (WatchCache transforms).

The controller keeps whole objects without what it never reads: managedFields, container env,
probes, volumes (but the kind of those the scheduler's filters read), per-container statuses, a
node's image list. The list is of fields known to be unread (the preemption engine, the phase and
enqueue functions), so anything new the engine comes to read is kept by default; a test checks
that every acceptance scenario decides the same on slimmed objects.

The quota server reads far less of a pod, and only of a PodGroup's members, so it keeps those
alone and only the fields its check reads (group_member_essentials).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from priogate import namespace_default, podgroup
from priogate.preemption.unmodelled import TRANSPARENT_VOLUMES

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
    # Volumes the scheduler's filters read make a pod opaque to the engine (the preempt
    # extender, priogate/preemption/extender.py): keep only those, and only their kind.
    opaque = [
        {key: ({} if key != "name" else value) for key, value in volume.items()}
        for volume in (pod.get("spec") or {}).get("volumes") or ()
        if isinstance(volume, Mapping) and set(volume) - {"name"} - TRANSPARENT_VOLUMES
    ]
    if opaque:
        spec["volumes"] = opaque
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


def group_member_essentials(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What the pod quota check reads of a pod: nothing unless it belongs to a PodGroup (only
    members draw on reservations), else its identity, group link, requests and phase."""
    if not podgroup.group_of(pod):
        return None
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    slim_meta = {
        k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if k in meta
    }
    if podgroup.GROUP_ANNOTATION in annotations:
        slim_meta["annotations"] = {podgroup.GROUP_ANNOTATION: annotations[podgroup.GROUP_ANNOTATION]}
    if podgroup.GROUP_LABEL in labels:
        slim_meta["labels"] = {podgroup.GROUP_LABEL: labels[podgroup.GROUP_LABEL]}
    slim_spec: dict[str, Any] = {}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            slim_spec[key] = [
                {k: c[k] for k in ("name", "resources", "restartPolicy") if k in c}
                if isinstance(c, Mapping)
                else c
                for c in spec[key]
            ]
    if "overhead" in spec:
        slim_spec["overhead"] = spec["overhead"]
    return {
        "metadata": slim_meta,
        "spec": slim_spec,
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def namespace_labels(namespace: Mapping[str, Any]) -> Mapping[str, Any]:
    """Of a Namespace, priogate reads only its identity, labels (the enrolment label) and the
    one annotation that names its default PriorityClass (priogate.namespace_default)."""
    meta = namespace.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta}
    default = (meta.get("annotations") or {}).get(namespace_default.ANNOTATION)
    if default is not None:
        kept["annotations"] = {namespace_default.ANNOTATION: default}
    return {"metadata": kept}
