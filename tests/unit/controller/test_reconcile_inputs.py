"""The reconciler's reading of the caches (priority resolution, holders, capacity), on real
WatchCaches filled with objects: no API server, no mocks."""

from __future__ import annotations

from controller.caches import Caches
from controller.reconcile import Reconciler
from priogate.kube.cache import WatchCache
from tests.builders import node, pod, podgroup, priority_class


def reconciler(pods: list[dict], groups: list[dict]) -> Reconciler:
    caches = Caches(
        podgroups=WatchCache.static("podgroups", groups),  # type: ignore[arg-type]
        pods=WatchCache.static("pods", pods),  # type: ignore[arg-type]
        quotas=WatchCache.static("quotas", []),  # type: ignore[arg-type]
        nodes=WatchCache.static("nodes", [node("n1", cpu="4", memory=None, pods=None)]),  # type: ignore[arg-type]
        ledgers=WatchCache.static("ledgers", []),  # type: ignore[arg-type]
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static(
            "classes",
            [
                priority_class("high", value=100),
                priority_class("polite", value=100, preemption_policy="Never"),
            ],
        ),
    )
    return Reconciler(None, caches, None)  # type: ignore[arg-type]


LOW_POD = pod("low", namespace="ns", cpu="3", priority=10, node="n1")


def phase_of(r: Reconciler, g: dict) -> str:
    return r.desired_status(g, r.members("ns", g["metadata"]["name"]))["phase"]


def test_a_high_priority_group_counts_lower_pods_as_preemptible():
    g = podgroup("g", namespace="ns", min_member=1, min_resources={"cpu": "2"}, priority_class="high")
    assert phase_of(reconciler([LOW_POD], [g]), g) == "Inqueue"


def test_a_group_that_never_preempts_waits_for_free_room():
    g = podgroup("g", namespace="ns", min_member=1, min_resources={"cpu": "2"}, priority_class="polite")
    r = reconciler([LOW_POD], [g])
    status = r.desired_status(g, [])
    assert status["phase"] == "Pending"
    assert "cluster capacity insufficient" in status["conditions"][1]["message"]


def test_without_a_class_the_members_priority_is_the_groups():
    g = podgroup("g", namespace="ns", min_member=1, min_resources={"cpu": "2"})
    member = pod("m", namespace="ns", cpu="1", priority=50, group="g")
    assert phase_of(reconciler([LOW_POD, member], [g]), g) == "Inqueue"  # 50 > 10: preemptible
    weak = pod("m", namespace="ns", cpu="1", priority=0, group="g")
    assert phase_of(reconciler([LOW_POD, weak], [g]), g) == "Pending"


def test_other_holding_groups_of_equal_priority_count():
    holder = podgroup(
        "first",
        namespace="ns",
        min_member=1,
        min_resources={"cpu": "3"},
        priority_class="high",
        phase="Inqueue",
    )
    g = podgroup("g", namespace="ns", min_member=1, min_resources={"cpu": "2"}, priority_class="high")
    assert phase_of(reconciler([], [holder, g]), g) == "Pending"
    waiting = podgroup(
        "first",
        namespace="ns",
        min_member=1,
        min_resources={"cpu": "3"},
        priority_class="high",
        phase="Pending",
    )  # a Pending group holds nothing
    assert phase_of(reconciler([], [waiting, g]), g) == "Inqueue"
