"""Issue 11, stranding: the built-in ResourceQuota plugin charges a pod when it is created, so a
gang's created-but-unbound members are already in the quota's status.used. Counting them again
as the group's demand demoted an Inqueue gang to Pending, and gang preemption (which requires
Inqueue) was then never tried. Through the reconciler, on real WatchCaches: no API server."""

from __future__ import annotations

from controller.caches import Caches
from controller.reconcile import Reconciler
from priogate.kube.cache import WatchCache


def member(name: str, node_name: str = "") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": {"scheduling.k8s.io/group-name": "gang"},
        },
        "spec": {
            "nodeName": node_name,
            "priority": 0,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Running" if node_name else "Pending"},
    }


def quota(used: str) -> dict:
    return {
        "metadata": {"name": "q", "namespace": "ns"},
        "spec": {"hard": {"cpu": "4"}},
        "status": {"hard": {"cpu": "4"}, "used": {"cpu": used}},
    }


def gang(phase: str) -> dict:
    return {
        "metadata": {"name": "gang", "namespace": "ns", "uid": "gang"},
        "spec": {"minMember": 3, "minResources": {"cpu": "3"}},
        "status": {"phase": phase},
    }


def reconciler(pods: list[dict], phase: str, used: str) -> Reconciler:
    caches = Caches(
        podgroups=WatchCache.static("podgroups", [gang(phase)]),  # type: ignore[arg-type]
        pods=WatchCache.static("pods", pods),  # type: ignore[arg-type]
        quotas=WatchCache.static("quotas", [quota(used)]),  # type: ignore[arg-type]
        nodes=WatchCache.static(  # type: ignore[arg-type]
            "nodes", [{"metadata": {"name": "n1"}, "spec": {}, "status": {"allocatable": {"cpu": "8"}}}]
        ),
        ledgers=WatchCache.static("ledgers", []),  # type: ignore[arg-type]
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", []),
    )
    return Reconciler(None, caches, None)  # type: ignore[arg-type]


def phase_after(pods: list[dict], phase: str, used: str) -> str:
    r = reconciler(pods, phase, used)
    group = r.caches.podgroups.get("ns", "gang")
    assert group is not None
    return r.desired_status(group, r.members("ns", "gang"))["phase"]


def test_created_unbound_members_are_not_counted_twice():
    # quota cpu=4; the three 1-cpu members exist (used=3) but none is bound: the gang's demand
    # is already in used, nothing of minResources cpu=3 is new.
    created = [member(f"m{i}") for i in range(3)]
    assert phase_after(created, "Inqueue", used="3") == "Inqueue"
    assert phase_after(created, "Pending", used="3") == "Inqueue"


def test_demand_counts_once_whether_members_are_uncreated_created_or_bound():
    # used = 1 from another pod + what the members charge; in every state the gang fits in 4.
    states = {
        "none created": ([], "1"),
        "one created": ([member("m0")], "2"),
        "two created, one bound": ([member("m0", "n1"), member("m1")], "3"),
        "all bound": ([member(f"m{i}", "n1") for i in range(3)], "4"),
    }
    for what, (pods, used) in states.items():
        assert phase_after(pods, "Pending", used) in ("Inqueue", "Running"), what


def test_a_gang_that_does_not_fit_is_still_refused():
    # used=2 by other pods, no member created: 2 + 3 > 4.
    assert phase_after([], "Pending", used="2") == "Pending"
    # one member created (used 3 = 2 others + 1): still 2 + 3 > 4.
    assert phase_after([member("m0")], "Pending", used="3") == "Pending"
