"""The reconciler's reading of the caches (priority resolution, holders, capacity), on real
WatchCaches filled with objects: no API server, no mocks."""

from __future__ import annotations

from controller.caches import Caches
from controller.reconcile import Reconciler
from priogate.kube.cache import WatchCache


def node(name: str, cpu: str) -> dict:
    return {"metadata": {"name": name}, "spec": {}, "status": {"allocatable": {"cpu": cpu}}}


def pod(name: str, cpu: str, priority: int, node_name: str = "", group: str = "") -> dict:
    meta: dict = {"name": name, "namespace": "ns"}
    if group:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "priority": priority,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def group(name: str, cpu: str, class_name: str = "", phase: str = "") -> dict:
    spec: dict = {"minMember": 1, "minResources": {"cpu": cpu}}
    if class_name:
        spec["priorityClassName"] = class_name
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": spec,
        "status": {"phase": phase} if phase else {},
    }


def pc(name: str, value: int, policy: str = "PreemptLowerPriority") -> dict:
    return {"metadata": {"name": name}, "value": value, "preemptionPolicy": policy}


def reconciler(pods: list[dict], groups: list[dict]) -> Reconciler:
    caches = Caches(
        podgroups=WatchCache.static("podgroups", groups),  # type: ignore[arg-type]
        pods=WatchCache.static("pods", pods),  # type: ignore[arg-type]
        quotas=WatchCache.static("quotas", []),  # type: ignore[arg-type]
        nodes=WatchCache.static("nodes", [node("n1", "4")]),  # type: ignore[arg-type]
        ledgers=WatchCache.static("ledgers", []),  # type: ignore[arg-type]
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", [pc("high", 100), pc("polite", 100, "Never")]),
    )
    return Reconciler(None, caches, None)  # type: ignore[arg-type]


LOW_POD = pod("low", "3", 10, node_name="n1")


def phase_of(r: Reconciler, g: dict) -> str:
    return r.desired_status(g, r.members("ns", g["metadata"]["name"]))["phase"]


def test_a_high_priority_group_counts_lower_pods_as_preemptible():
    g = group("g", "2", "high")
    assert phase_of(reconciler([LOW_POD], [g]), g) == "Inqueue"


def test_a_group_that_never_preempts_waits_for_free_room():
    g = group("g", "2", "polite")
    r = reconciler([LOW_POD], [g])
    status = r.desired_status(g, [])
    assert status["phase"] == "Pending"
    assert "cluster capacity insufficient" in status["conditions"][1]["message"]


def test_without_a_class_the_members_priority_is_the_groups():
    g = group("g", "2")
    member = pod("m", "1", 50, group="g")
    assert phase_of(reconciler([LOW_POD, member], [g]), g) == "Inqueue"  # 50 > 10: preemptible
    weak = pod("m", "1", 0, group="g")
    assert phase_of(reconciler([LOW_POD, weak], [g]), g) == "Pending"


def test_other_holding_groups_of_equal_priority_count():
    holder = group("first", "3", "high", phase="Inqueue")
    g = group("g", "2", "high")
    assert phase_of(reconciler([], [holder, g]), g) == "Pending"
    # A Pending group holds nothing for a group ahead of it in the enqueue order (here, by
    # name, as neither has a creation time), but what it waits for is held against the groups
    # behind it (tests/unit/test_enqueue_order.py has the table).
    behind = group("second", "3", "high", phase="Pending")
    assert phase_of(reconciler([], [behind, g]), g) == "Inqueue"
    ahead = group("first", "3", "high", phase="Pending")
    assert phase_of(reconciler([], [ahead, g]), g) == "Pending"
