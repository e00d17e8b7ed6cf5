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

    # A Pending group behind g in the enqueue order (younger, same priority) holds nothing for
    # it; one ahead of it (older) holds what it waits for (tests/unit/test_enqueue_order.py).
    def waiting(name: str, created: float) -> dict:
        return podgroup(
            name,
            namespace="ns",
            created=created,
            min_member=1,
            min_resources={"cpu": "3"},
            priority_class="high",
            phase="Pending",
        )

    g = podgroup(
        "g", namespace="ns", created=5, min_member=1, min_resources={"cpu": "2"}, priority_class="high"
    )
    assert phase_of(reconciler([], [waiting("younger", 10), g]), g) == "Inqueue"
    assert phase_of(reconciler([], [waiting("older", 0), g]), g) == "Pending"


def test_a_waiting_group_holds_nothing_in_other_namespaces_and_a_new_quota_is_read():
    # An older group in namespace "other" wants 3 of the node's 4 cpus and waits: it holds them
    # against a younger group of its namespace, not against one of "ns".
    older = podgroup(
        "older", namespace="other", created=0, min_member=1, min_resources={"cpu": "3"}, priority_class="high"
    )
    g = podgroup(
        "g", namespace="ns", created=5, min_member=1, min_resources={"cpu": "2"}, priority_class="high"
    )
    mate = podgroup(
        "mate", namespace="other", created=5, min_member=1, min_resources={"cpu": "2"}, priority_class="high"
    )
    r = reconciler([], [older, g, mate])
    assert phase_of(r, g) == "Inqueue"
    assert r.desired_status(mate, [])["phase"] == "Pending"
    # The view is read again when a quota changes: one that refuses g now counts.
    quota = {
        "metadata": {"name": "q", "namespace": "ns"},
        "spec": {"hard": {"cpu": "1"}},
        "status": {"used": {"cpu": "0"}},
    }
    r.caches.quotas.apply_event("ADDED", quota)
    assert phase_of(r, g) == "Pending"


def test_the_enqueue_inputs_kept_across_changes_equal_a_fresh_build():
    """_cluster keeps each pod's and group's part by resourceVersion; after changes it must read
    exactly what a reconciler that never saw the old objects reads."""

    def versioned(obj: dict, version: int) -> dict:
        obj["metadata"]["resourceVersion"] = str(version)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        return obj

    groups = [
        versioned(
            podgroup(
                f"g{i}", namespace="ns", min_member=2, min_resources={"cpu": "1"}, priority_class="high"
            ),
            1,
        )
        for i in range(3)
    ]
    pods = [
        versioned(pod(f"m{i}", namespace="ns", cpu="1", priority=100, group=f"g{i % 3}"), 1) for i in range(6)
    ]
    kept = reconciler(pods, groups)
    kept._cluster()
    # A member bound, a group Inqueue, a group's demand raised, a member gone, a new pod.
    changes = [
        (
            "pods",
            "MODIFIED",
            versioned(pod("m0", namespace="ns", cpu="1", priority=100, group="g0", node="n1"), 2),
        ),
        (
            "podgroups",
            "MODIFIED",
            versioned(
                podgroup(
                    "g1",
                    namespace="ns",
                    min_member=2,
                    min_resources={"cpu": "1"},
                    priority_class="high",
                    phase="Inqueue",
                ),
                2,
            ),
        ),
        (
            "podgroups",
            "MODIFIED",
            versioned(
                podgroup(
                    "g2", namespace="ns", min_member=2, min_resources={"cpu": "3"}, priority_class="high"
                ),
                3,
            ),
        ),
        ("pods", "DELETED", pods[4]),
        ("pods", "ADDED", versioned(pod("other", namespace="ns", cpu="2", priority=5, node="n1"), 4)),
    ]
    quota = versioned(
        {
            "metadata": {"name": "q", "namespace": "ns"},
            "spec": {"hard": {"cpu": "3"}},
            "status": {"used": {}},
        },
        5,
    )
    changes.append(("quotas", "ADDED", quota))
    for cache, kind, obj in changes:
        getattr(kept.caches, cache).apply_event(kind, obj)
        fresh = reconciler(list(kept.caches.pods.items()), list(kept.caches.podgroups.items()))
        fresh.caches.quotas.replace_all(list(kept.caches.quotas.items()), "0")
        assert kept._cluster().groups == fresh._cluster().groups, (cache, kind)
        assert kept._cluster().bound == fresh._cluster().bound, (cache, kind)
        # and so decides as it, each namespace part reused or not
        for g in kept.caches.podgroups.items():
            members = kept.members("ns", g["metadata"]["name"])
            decided = kept.enqueue_verdict(kept.demand(g, members))
            assert decided == fresh.enqueue_verdict(fresh.demand(g, members)), (cache, kind)
        assert kept.over_quota("ns") == fresh.over_quota("ns")


FORGED_KEY = "cpu\n\x1b[2J\x1b[H State: Running"


def test_a_minresources_name_with_control_characters_is_escaped_in_the_condition():
    """The capacity verdict names the resource short of room; a tenant's name reaches the status,
    which kubectl prints, escaped, and the status recomputed from it is equal (never rewritten)."""
    g = podgroup("g", namespace="ns", min_member=1, min_resources={FORGED_KEY: "1"})
    r = reconciler([], [g])
    status = r.desired_status(g, [])
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Unschedulable")
    assert status["phase"] == "Pending"
    assert "minResources cpu\\n\\x1b[2J\\x1b[H State: Running=1 exceed" in message, message
    assert "\x1b" not in message and "\n" not in message
    assert r.desired_status({**g, "status": status}, []) == status
