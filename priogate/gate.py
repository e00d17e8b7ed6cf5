"""Delay Pod Creation, enforced: the scheduling gate that holds a PodGroup's members until the
group is admitted (kube-batch doc/design/delay-pod-creation.md: `Inqueue` "will let
operators/controllers start to create pods"; a PodGroupController enforces the protocol). Pure.

kube-scheduler does not consider a pod while `spec.schedulingGates` is not empty (KEP-3521, GA
in 1.30), yet the pod exists and the ResourceQuota plugin charges it: so a gang that cannot fit
takes no node while it waits, and no partial gang holds part of the cluster. Kueue holds the
pods of unadmitted workloads the same way.

- At admission (webhook/rules/pod_gate.py) a member of a group that is not admitted yet (no
  group, or one waiting: no phase or Pending) gets GATE; a member of an admitted group (Inqueue,
  Running, Unknown) or a finished one gets none.
- The controller (controller/gates.py) removes GATE from a group's members once it is admitted,
  and from the members of a group that does not appear within a bound (a typo must not hold a
  pod forever), with an Event. Nothing is put back: kube-apiserver refuses a gate added after
  creation (pkg/apis/core/validation ValidatePodUpdate), and a running pod has nothing to wait
  for.
- Only the controller's identity removes GATE (webhook/rules/pod_gate_guard.py), as only it
  writes the preemption record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from priogate.podgroup import FINISHED_PHASES, HOLDING_PHASES, group_of

GATE = "priogate.io/podgroup"
# How long a member may wait for a PodGroup that does not exist before its gate is lifted
# (controller --gate-orphan-seconds): long enough for an operator that creates pods before
# their group, short enough that a typo is seen the same hour.
DEFAULT_ORPHAN_SECONDS = 300.0


def gates(pod: Mapping[str, Any]) -> list[Any]:
    gated = ((pod.get("spec") or {}).get("schedulingGates")) or []
    return gated if isinstance(gated, list) else []


def has_gate(pod: Mapping[str, Any]) -> bool:
    return any(isinstance(g, Mapping) and g.get("name") == GATE for g in gates(pod))


def admitted(phase: str | None) -> bool:
    """Whether a group in `phase` lets its members be scheduled (None: no such group)."""
    return phase in HOLDING_PHASES or phase in FINISHED_PHASES


def needs_gate(pod: Mapping[str, Any], group_phase: str | None) -> bool:
    """A member pod being created whose group (phase None: not there) is not admitted yet. A
    pod that names its node bypasses the scheduler, and kube-apiserver refuses gates on it."""
    if not group_of(pod) or (pod.get("spec") or {}).get("nodeName") or has_gate(pod):
        return False
    return not admitted(group_phase)


def gate_patch(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch that adds GATE to a pod being created."""
    if "schedulingGates" in (pod.get("spec") or {}) and isinstance(pod["spec"]["schedulingGates"], list):
        return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]


def lift_patch() -> dict[str, Any]:
    """The strategic merge patch that removes GATE, and only it (schedulingGates merge by name:
    k8s.io/api core/v1 PodSpec patchMergeKey), whatever other gates the pod carries."""
    return {"spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]}}


def dropped(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """An update that removes GATE."""
    return has_gate(old) and not has_gate(new)


def orphans_due(
    members: Sequence[tuple[str, float]], now: float, bound: float
) -> tuple[list[str], float | None]:
    """Of gated members (name, created epoch seconds) of a group that does not exist: those
    whose wait reached `bound`, and the seconds until the next one does (None: none left)."""
    due = [name for name, created in members if now - created >= bound]
    waiting = [created + bound - now for _, created in members if now - created < bound]
    return due, (min(waiting) if waiting else None)
