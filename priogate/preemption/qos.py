"""A pod's QoS class, as the kubelet computes it (pkg/apis/core/v1/helper/qos, GetPodQOS and
ComputePodQOS): only cpu and memory count, and only positive quantities.

- status.qosClass wins when set (the API server sets it on every pod it creates);
- with PodLevelResources (beta, on by default since 1.34) and spec.resources set, the pod-level
  requests and limits decide; Guaranteed needs both a cpu and a memory limit there;
- otherwise every app and init container: Guaranteed needs each of them to limit both cpu
  and memory, and the summed requests to equal the summed limits;
- no request and no limit at all: BestEffort; anything else: Burstable.

The kubelet sees pods after the API server's defaulting (SetDefaults_Pod: a container resource
with a limit but no request requests its limit); a hand-written snapshot may lack it, so the
same defaulting is applied here first.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from priogate.resources import parse_resource_list

BEST_EFFORT, BURSTABLE, GUARANTEED = "BestEffort", "Burstable", "Guaranteed"
QOS_CLASSES = (BEST_EFFORT, BURSTABLE, GUARANTEED)  # least protected first
QOS_RANK = {name: rank for rank, name in enumerate(QOS_CLASSES)}
_COMPUTE = ("cpu", "memory")


def _positive(raw: Any, where: str) -> dict[str, Fraction]:
    if raw is not None and not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a map of quantities")
    listed = parse_resource_list(raw, context=where)
    return {name: q for name, q in listed.items() if name in _COMPUTE and q > 0}


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, q in more.items():
        total[name] = total.get(name, Fraction(0)) + q


def _section(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object")
    return value


def pod_qos(pod: Mapping[str, Any], where: str = "pod") -> str:
    """The pod's QoS class (ValueError on malformed resources)."""
    status = _section(pod.get("status"), f"{where} status")
    given = status.get("qosClass")
    if isinstance(given, str) and given in QOS_RANK:
        return given
    spec = _section(pod.get("spec"), f"{where} spec")
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    pod_level = _section(spec.get("resources"), f"{where} spec.resources")
    if pod_level:
        _add(requests, _positive(pod_level.get("requests"), f"{where} spec.resources.requests"))
        if pod_level.get("limits"):
            found = _positive(pod_level.get("limits"), f"{where} spec.resources.limits")
            _add(limits, found)
            if not all(name in found for name in _COMPUTE):
                guaranteed = False
    else:
        containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for container in containers:
            resources = _section(_section(container, f"{where} container").get("resources"), where)
            found = _positive(resources.get("limits"), f"{where} limits")
            asked = _positive(resources.get("requests"), f"{where} requests")
            for name, q in found.items():  # the API server's defaulting
                asked.setdefault(name, q)
            _add(requests, asked)
            _add(limits, found)
            if not all(name in found for name in _COMPUTE):
                guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    equal = all(limits.get(name) == q for name, q in requests.items())
    if guaranteed and equal and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE
