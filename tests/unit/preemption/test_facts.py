"""The pod facts only the optional policies read: QoS class (as the kubelet computes it),
owner/driver pods, and since when a pod is unschedulable."""

from __future__ import annotations

import math
from typing import Any

import pytest

from priogate.preemption.engine import prepare
from priogate.preemption.qos import pod_qos
from priogate.preemption.snapshot import Snapshot
from priogate.preemption.state import apply_decision
from tests.builders import node, pod, ts


def containers(*resources: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    listed = [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]
    spec: dict[str, Any] = {"containers": listed}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)]
    return {"metadata": {"name": "p"}, "spec": spec}


BOTH = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        # upstream qos_test.go's cases, by shape
        (containers({}), "BestEffort"),
        (containers({}, {}), "BestEffort"),
        (containers({"limits": {"example.com/gpu": "1"}}), "BestEffort"),  # only cpu/memory count
        (containers({"requests": {"cpu": "0"}}), "BestEffort"),  # only positive quantities
        (containers({"requests": BOTH, "limits": BOTH}), "Guaranteed"),
        (containers({"limits": BOTH}), "Guaranteed"),  # requests default to limits
        (containers({"requests": BOTH, "limits": BOTH}, {"requests": BOTH, "limits": BOTH}), "Guaranteed"),
        (containers({"requests": BOTH, "limits": BOTH}, {}), "Burstable"),
        (containers({"requests": {"cpu": "1"}}), "Burstable"),
        (containers({"requests": BOTH, "limits": {"cpu": "1", "memory": "2Gi"}}), "Burstable"),
        (containers({"limits": {"cpu": "1"}}), "Burstable"),  # no memory limit
        (containers({"requests": BOTH, "limits": BOTH}, init=({},)), "Burstable"),
        (containers({"requests": BOTH, "limits": BOTH}, init=({"limits": BOTH},)), "Guaranteed"),
        # status.qosClass, when set, wins (GetPodQOS)
        ({**containers({}), "status": {"qosClass": "Guaranteed"}}, "Guaranteed"),
        # pod-level resources (PodLevelResources, on by default)
        ({"spec": {"resources": {"requests": BOTH, "limits": BOTH}, "containers": [{}]}}, "Guaranteed"),
        ({"spec": {"resources": {"limits": {"cpu": "1"}}, "containers": [{}]}}, "Burstable"),
        ({"spec": {"resources": {"requests": {"cpu": "1"}}, "containers": [{}]}}, "Burstable"),
    ],
)
def test_qos_class_as_the_kubelet_computes_it(obj: dict[str, Any], expected: str) -> None:
    assert pod_qos(obj) == expected


def snapshot(*pods: dict[str, Any]) -> Snapshot:
    return Snapshot.from_objects(nodes=[node("n0", cpu="8")], pods=pods)


def with_owner(obj: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"kind": kind, "name": name, "apiVersion": "v1", "uid": "u"}]
    return obj


def test_owner_pods_are_counted_and_forgotten_with_their_dependents() -> None:
    driver = pod("driver", priority=1, cpu="1", node="n0")
    executors = [with_owner(pod(f"e{i}", priority=1, cpu="1", node="n0"), "Pod", "driver") for i in range(2)]
    replica = with_owner(pod("r", priority=1, cpu="1", node="n0"), "ReplicaSet", "driver")
    state = prepare(snapshot(driver, *executors, replica))
    assert state.pods["default/e0"].owner_pods == ("default/driver",)
    assert state.pods["default/r"].owner_pods == ()
    assert state.owner_refs == {"default/driver": 2}
    after = apply_decision(state, ["default/e0"], {})
    assert after.owner_refs == {"default/driver": 1} and state.owner_refs == {"default/driver": 2}
    assert apply_decision(after, ["default/e1"], {}).owner_refs == {}


def test_unschedulable_since_is_the_pod_scheduled_false_transition() -> None:
    waiting = pod("w", priority=1, cpu="1", phase="Pending")
    waiting["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": ts(30)}
    ]
    fresh = pod("f", priority=1, cpu="1", phase="Pending")
    scheduled = pod("s", priority=1, cpu="1", node="n0")
    scheduled["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(1)}
    ]
    pods = {p.name: p for p in snapshot(waiting, fresh, scheduled).pods}
    assert pods["w"].unschedulable_since == pods["w"].created + 30
    assert pods["f"].unschedulable_since == math.inf
    assert pods["s"].unschedulable_since == math.inf
