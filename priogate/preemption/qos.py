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

from priogate.resources import parse_quantity

BEST_EFFORT, BURSTABLE, GUARANTEED = "BestEffort", "Burstable", "Guaranteed"
QOS_CLASSES = (BEST_EFFORT, BURSTABLE, GUARANTEED)  # least protected first
QOS_RANK = {name: rank for rank, name in enumerate(QOS_CLASSES)}
_COMPUTE = ("cpu", "memory")


def _positive(raw: Any, where: str, field: str) -> dict[str, Fraction]:
    """The positive cpu and memory quantities of a resource list (other names are not read:
    pod_requests validates the whole list)."""
    if not raw:
        return {}
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise ValueError(f"{where} {field} must be a map of quantities")
    found = {}
    for name in _COMPUTE:
        value = raw.get(name)
        if value is not None:
            q = parse_quantity(value)
            if q.numerator > 0:
                found[name] = q
    return found


def _add(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, q in more.items():
        total[name] = total.get(name, Fraction(0)) + q


def _section(value: Any, where: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ValueError(f"{where} {field} must be an object")
    return value


def pod_qos(pod: Mapping[str, Any], where: str = "pod") -> str:
    """The pod's QoS class (ValueError on malformed resources)."""
    status = pod.get("status")
    if status:
        given = _section(status, where, "status").get("qosClass")
        if isinstance(given, str) and given in QOS_RANK:
            return given
    spec = _section(pod.get("spec"), where, "spec")
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    pod_level = _section(spec.get("resources"), where, "spec.resources")
    if pod_level:
        _add(requests, _positive(pod_level.get("requests"), where, "spec.resources.requests"))
        if pod_level.get("limits"):
            found = _positive(pod_level.get("limits"), where, "spec.resources.limits")
            _add(limits, found)
            if len(found) != len(_COMPUTE):
                guaranteed = False
    else:
        for field in ("containers", "initContainers"):
            for container in spec.get(field) or ():
                resources = _section(_section(container, where, field).get("resources"), where, "resources")
                if not resources:
                    guaranteed = False  # no cpu and memory limits
                    continue
                found = _positive(resources.get("limits"), where, "limits")
                asked = _positive(resources.get("requests"), where, "requests")
                if len(found) != len(_COMPUTE):
                    guaranteed = False
                if not guaranteed and (found or asked):
                    return BURSTABLE  # neither BestEffort nor Guaranteed any more
                for name, q in found.items():  # the API server's defaulting
                    asked.setdefault(name, q)
                _add(requests, asked)
                _add(limits, found)
    if not requests and not limits:
        return BEST_EFFORT
    equal = all(limits.get(name) == q for name, q in requests.items())
    if guaranteed and equal and len(requests) == len(limits):
        return GUARANTEED
    return BURSTABLE
