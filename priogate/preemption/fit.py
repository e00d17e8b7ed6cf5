"""Does a pod fit a node: the scheduler's filters, split the way preemption needs them.

Static filters (unschedulable, node selector, required node affinity, taints) cannot be fixed
by removing pods: a node failing one is "unresolvable" for the pod. Resource fit (cpu, memory,
ephemeral-storage, extended resources, pod count) can be, and is checked on integer vectors:
cpu in millicores and everything else in whole units, rounded up, as the scheduler's
framework.Resource does (Quantity.MilliValue / Value).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from priogate.preemption.records import NodeInfo, PodInfo
from priogate.preemption.selectors import (
    BLOCKING_EFFECTS,
    UNSCHEDULABLE_TAINT_KEY,
    Taint,
    node_affinity_matches,
    tolerated,
)
from priogate.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    ResourceList,
    ceil_milli_value,
    ceil_value,
)

Vector = tuple[int, ...]
# (dimension index, amount) for every dimension a pod asks for: the only ones checked.
Need = tuple[tuple[int, int], ...]

FIRST_DIMS = (CPU, MEMORY, EPHEMERAL_STORAGE, PODS)
PODS_DIM = 3  # every pod counts 1 here
_UNSCHEDULABLE = Taint(UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule")
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"


def make_dims(nodes: Iterable[NodeInfo], pods: Iterable[PodInfo]) -> tuple[str, ...]:
    """Resource names of a snapshot: the four standard ones, then the rest sorted."""
    extra: set[str] = set()
    for node in nodes:
        extra.update(node.allocatable)
    for pod in pods:
        extra.update(pod.requests)
    return FIRST_DIMS + tuple(sorted(extra - set(FIRST_DIMS)))


def to_vector(resources: ResourceList, dims: Sequence[str], *, pod: bool) -> Vector:
    """Integer amounts per dimension. A pod counts 1 in `pods`; a node offers its allocatable."""
    values = []
    for name in dims:
        if name == PODS and pod:
            values.append(1)
            continue
        q = resources.get(name)
        if q is None:
            values.append(0)
        elif name == CPU:
            values.append(ceil_milli_value(q))
        else:
            values.append(ceil_value(q))
    return tuple(values)


def need_of(vector: Vector) -> Need:
    return tuple((d, amount) for d, amount in enumerate(vector) if amount > 0)


def static_failure(pod: PodInfo, node: NodeInfo) -> str:
    """Why removing pods can never make `pod` fit `node` ("" when nothing forbids it)."""
    if not node.taints and not node.unschedulable and not pod.node_selector and pod.affinity is None:
        return ""
    if node.unschedulable and not tolerated(pod.tolerations, _UNSCHEDULABLE):
        return UNSCHEDULABLE
    labels = node.labels
    if any(labels.get(k) != v for k, v in pod.node_selector.items()):
        return SELECTOR_MISMATCH
    if pod.affinity is not None and not node_affinity_matches(pod.affinity, node.name, labels):
        return SELECTOR_MISMATCH
    for taint in node.taints:
        if taint.effect in BLOCKING_EFFECTS and not tolerated(pod.tolerations, taint):
            return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return ""


def static_signature(pod: PodInfo) -> tuple:
    """Pods with equal signatures pass the static filters on exactly the same nodes."""
    return (
        tuple(sorted(pod.node_selector.items())),
        pod.affinity,
        tuple(sorted(set(pod.tolerations), key=repr)),
    )


def insufficient_message(dims_short: Iterable[int], dims: Sequence[str]) -> str:
    parts = ["Too many pods" if dims[d] == PODS else f"Insufficient {dims[d]}" for d in dims_short]
    return ", ".join(parts)
