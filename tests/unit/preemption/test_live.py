"""The live state: after any sequence of watch events, decisions on LiveClusterState.current()
equal those on a fresh prepare(Snapshot.from_objects(...)) of the objects the events leave
(malformed ones counting as absent): a property test over random event streams (the tricky
cases one by one: test_live_cases.py).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import node, pdb, pod, podgroup, priority_class, ts
from tests.unit.preemption.live_world import (
    GPU,
    GROUPS,
    NODES,
    World,
    assert_same_decisions,
)

# ---- the property ----------------------------------------------------------------------------

CPU = st.sampled_from(["250m", "500m", "1000m", "1500m", "2000m"])
PRIORITY = st.sampled_from([0, 1, 5, 10, 20])


HOST = "kubernetes.io/hostname"


@st.composite
def a_node(draw: st.DrawFn, name: str) -> tuple[dict[str, Any], bool]:
    if draw(st.integers(0, 15)) == 0:
        bad = node(name)
        bad["status"]["allocatable"]["cpu"] = "lots"
        return bad, True
    taint = draw(st.sampled_from([None, None, "NoSchedule"]))
    obj = node(
        name,
        cpu=draw(st.sampled_from(["2", "3", "4"])),
        pods=draw(st.sampled_from([3, 110])),
        allocatable={GPU: "2"} if draw(st.integers(0, 5)) == 0 else None,
        labels={"zone": draw(st.sampled_from(["a", "b"]))},
        taints=[{"key": "dedicated", "value": "x", "effect": taint}] if taint else None,
        unschedulable=draw(st.integers(0, 5)) == 0,
    )
    return obj, False


@st.composite
def a_pod(draw: st.DrawFn, name: str) -> tuple[dict[str, Any], bool]:
    if draw(st.integers(0, 20)) == 0:
        return pod(name, cpu="-1"), True
    where = draw(st.sampled_from(["pending", "pending", "bound", "bound", "bound"]))
    kind = draw(st.sampled_from(["plain"] * 6 + ["daemon", "terminating", "done", "opted", "classed"]))
    labels = {"app": draw(st.sampled_from(["a", "b"]))}
    if kind == "opted":
        labels["priogate.io/allow-preemption"] = "false"
    group = draw(st.sampled_from([None, None, *GROUPS]))
    qos = draw(st.sampled_from(["burstable", "burstable", "guaranteed", "best-effort"]))
    obj = pod(
        name,
        priority=None if kind == "classed" else draw(PRIORITY),
        priority_class=draw(st.sampled_from(["low", "high", "gone"])) if kind == "classed" else None,
        cpu=None if qos == "best-effort" else draw(CPU),
        limits={"cpu": "2", "memory": "1Gi"} if qos == "guaranteed" else None,
        requests={GPU: "1"} if draw(st.integers(0, 9)) == 0 else None,
        node=draw(st.sampled_from(NODES)) if where == "bound" else None,
        started=draw(st.integers(0, 20)),
        created=draw(st.integers(0, 5)),
        labels=labels,
        group=group,
        owner="DaemonSet" if kind == "daemon" else None,
        deleting=kind == "terminating",
        preempted=kind == "terminating",
        phase="Succeeded" if kind == "done" else None,
        nominated=draw(st.sampled_from([None, None, *NODES])) if where == "pending" else None,
        tolerations=[{"key": "dedicated", "operator": "Exists"}] if draw(st.booleans()) else None,
    )
    if draw(st.integers(0, 3)) == 0:  # hard topology spread over the nodes' zones
        obj["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": draw(st.sampled_from([1, 2])),
                "topologyKey": draw(st.sampled_from(["zone", "zone", "rack"])),
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": draw(st.sampled_from(["a", "b"]))}},
                "minDomains": draw(st.sampled_from([1, 1, 3])),
            }
        ]
    if draw(st.integers(0, 5)) == 0:  # hostname anti-affinity and a host port: gang decisions read them
        term = {
            "labelSelector": {"matchLabels": {"app": draw(st.sampled_from(["a", "b"]))}},
            "topologyKey": HOST,
        }
        obj["spec"]["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    if draw(st.integers(0, 5)) == 0:
        obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    if draw(st.integers(0, 3)) == 0:  # an executor naming its driver pod (maybe not there)
        driver = draw(st.sampled_from(["p0", "p1", "p2", "p100", "p101"]))
        obj["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": driver, "apiVersion": "v1", "uid": "u"}]
    if where == "pending" and draw(st.booleans()):
        obj.setdefault("status", {"phase": "Pending"})["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": ts(draw(st.sampled_from([0, 10, 18]))),
            }
        ]
    return obj, False


@st.composite
def an_event(draw: st.DrawFn, world: World) -> tuple[str, str, dict[str, Any]]:
    """One event, already applied to `world`."""
    kind = draw(st.sampled_from(["pods"] * 6 + ["nodes"] * 2 + ["podgroups", "pdbs", "classes"]))
    existing = sorted(world.objects[kind])
    delete = existing and draw(st.integers(0, 4)) == 0
    if delete:
        key = draw(st.sampled_from(existing))
        obj, _ = world.objects[kind].pop(key)
        return kind, "DELETED", obj
    if kind == "pods":
        key = draw(st.sampled_from([*existing, "p-new"] if existing else ["p-new"]))
        name = f"p{world.created}" if key == "p-new" else key.split("/")[1]
        world.created += 1
        old = world.objects["pods"].get(f"default/{name}")
        if old is not None and not old[1] and draw(st.booleans()):
            obj = copy.deepcopy(old[0])  # bind, start terminating, or a status-only update
            change = draw(st.sampled_from(["bind", "terminate", "status"]))
            if change == "bind" and not obj["spec"].get("nodeName"):
                obj["spec"]["nodeName"] = draw(st.sampled_from(NODES))
                obj["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:09Z"}
            elif change == "terminate":
                obj["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
            else:
                obj.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True"}]
            bad = False
        else:
            obj, bad = draw(a_pod(name))
    elif kind == "nodes":
        name = draw(st.sampled_from(NODES))
        old = world.objects["nodes"].get(name)
        if old is not None and not old[1] and draw(st.booleans()):
            obj, bad = copy.deepcopy(old[0]), False  # a heartbeat
            obj["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "2026-01-01T00:01:00Z"}]
        else:
            obj, bad = draw(a_node(name))
    elif kind == "podgroups":
        name = draw(st.sampled_from(GROUPS))
        obj = podgroup(
            name,
            min_member=draw(st.integers(1, 3)),
            phase=draw(st.sampled_from(["Inqueue", "Running", "Pending"])),
            priority_class=draw(st.sampled_from([None, "high"])),
        )
        bad = False
    elif kind == "pdbs":
        name = draw(st.sampled_from(["pdb0", "pdb1"]))
        obj = pdb(
            name, match_labels={"app": draw(st.sampled_from(["a", "b"]))}, allowed=draw(st.integers(0, 2))
        )
        bad = False
    else:
        name = draw(st.sampled_from(["low", "high"]))
        obj = priority_class(name, value=draw(st.sampled_from([1, 15, 30])), default=draw(st.booleans()))
        bad = False
    world.put(kind, f"default/{name}" if kind in ("pods", "podgroups", "pdbs") else name, obj, bad)
    return kind, "MODIFIED" if draw(st.booleans()) else "ADDED", obj


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_live_state_decides_as_a_fresh_build(data: st.DataObject) -> None:
    world = World()
    for name in NODES[:3]:
        world.put("nodes", name, *data.draw(a_node(name)))
    for i in range(data.draw(st.integers(0, 6))):
        world.put("pods", f"default/p{i}", *data.draw(a_pod(f"p{i}")))
    live = world.live()
    live.current()
    for _ in range(data.draw(st.integers(1, 25))):
        kind, event_type, obj = data.draw(an_event(world))
        live.apply(kind, event_type, obj)
        if data.draw(st.integers(0, 3)) == 0:  # decide mid-stream too: memo carried across
            assert_same_decisions(live.current(), world.fresh())
    assert_same_decisions(live.current(), world.fresh())
