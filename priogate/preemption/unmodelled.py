"""What the preemption engine does not model, said once: for `simulate`'s output and for the
extender, which computes other victims only on nodes where none of it is in play."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What the engine (and so `simulate`) does not model: kube-scheduler's own filters decide these,
# and in the preemptor mode its preemption does (the extender only shapes its candidates).
NOT_MODELLED = (
    "inter-pod affinity and anti-affinity, hostPorts, volumes (binding, zones, limits, "
    "restrictions) and DRA resource claims: kube-scheduler's filters decide those; the engine "
    "models resources, node selectors and affinity, taints, unschedulable nodes and hard topology "
    "spread only"
)

# Volume sources that no scheduler filter reads (VolumeRestrictions, VolumeBinding,
# VolumeZone and the volume limits plugins look at persistent, CSI, in-tree cloud and
# ephemeral volumes only): a pod with others is opaque to the engine.
TRANSPARENT_VOLUMES = frozenset({"configMap", "secret", "emptyDir", "downwardAPI", "projected"})
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def engine_blind(pod: Mapping[str, Any]) -> str:
    """Why kube-scheduler's filters may treat this pod in ways the engine does not model
    (a short phrase), or "" when resources and the static filters are all that matter."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        return "malformed spec"
    affinity = spec.get("affinity") or {}
    if isinstance(affinity, Mapping) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity")):
        return "inter-pod affinity"
    for key in CONTAINER_LISTS:
        for container in spec.get(key) or ():
            if not isinstance(container, Mapping):
                continue
            for port in container.get("ports") or ():
                if isinstance(port, Mapping) and port.get("hostPort"):
                    return "hostPorts"
    for volume in spec.get("volumes") or ():
        if isinstance(volume, Mapping) and set(volume) - {"name"} - TRANSPARENT_VOLUMES:
            return f"volume {volume.get('name', '')}"
    if spec.get("resourceClaims"):
        return "resource claims"
    return ""
