"""--evict-overused through the reconciler (controller/overuse.py) on the in-memory API server:
which members are evicted for a waiting group, through the Eviction API, and when none is."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.caches import Caches
from controller.events import EventRecorder
from controller.overuse import OverusedEvictor
from controller.reconcile import Reconciler
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.preemption_record import OPT_OUT_LABEL, YUNIKORN_OPT_OUT_LABEL
from tests.builders import cpu_podgroup, node, pod
from tests.fake_api import FakeApi

NS = "default"


def member(name: str, second: int, *, group: str = "over", ns: str = NS, labels: dict | None = None) -> dict:
    obj = pod(name, namespace=ns, cpu="1", priority=0, node="n1", group=group, created=second, labels=labels)
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def path_of(obj: dict) -> str:
    meta = obj["metadata"]
    if obj.get("kind") == "PodGroup":
        return resource_path(GROUP_VERSION, PLURAL, meta["namespace"], meta["name"])
    return resource_path("v1", "pods", meta["namespace"], meta["name"])


class World:
    def __init__(self, pods: list[dict], groups: list[dict], *, evict: bool = True, mode: str = "hard"):
        self.client = FakeApi({path_of(o): o for o in [*pods, *groups]})
        self.caches = Caches(
            podgroups=WatchCache.static("podgroups", copy.deepcopy(groups)),  # type: ignore[arg-type]
            pods=WatchCache.static("pods", copy.deepcopy(pods)),  # type: ignore[arg-type]
            quotas=WatchCache.static("quotas", []),  # type: ignore[arg-type]
            nodes=WatchCache.static("nodes", [node("n1", cpu="4", memory=None, pods=None)]),  # type: ignore[arg-type]
            ledgers=WatchCache.static("ledgers", []),  # type: ignore[arg-type]
            pdbs=WatchCache.static("pdbs", []),
            classes=WatchCache.static("classes", []),
        )
        events = EventRecorder(self.client, "test")
        self.clock = 0.0
        self.evictor = OverusedEvictor(
            self.client, self.caches, events, lambda: True, opt_out_mode=mode, clock=lambda: self.clock
        )
        self.reconciler = Reconciler(
            self.client, self.caches, None, events=events, evictor=self.evictor if evict else None
        )

    def evicted(self) -> list[str]:
        return [c.path.split("/")[-2] for c in self.client.calls if c.path.endswith("/eviction")]

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [c.body for c in self.client.calls if c.body and c.body.get("reason") == reason]


def over_and_wait(wait_cpu: str = "2") -> list[dict]:
    """Group "over" (Running, minimum 1 cpu) and group "wait" (Pending, `wait_cpu`), as stored."""
    return [
        cpu_podgroup("over", "1", namespace=NS, phase="Running", resource_version="1"),
        cpu_podgroup("wait", wait_cpu, namespace=NS, phase="Pending", resource_version="1"),
    ]


def overused(ns: str = NS, labels: dict[str, dict] | None = None) -> list[dict]:
    """Group "over" (Running, minimum 1 cpu) with four 1-cpu members filling the 4-cpu node."""
    return [member(f"o{i}", i, ns=ns, labels=(labels or {}).get(f"o{i}")) for i in range(4)]


def test_only_the_surplus_it_lacks_is_evicted_newest_first_with_events():
    w = World(overused(), over_and_wait())
    assert w.reconciler.reconcile(NS, "wait") == "evicted-overused"
    assert w.evicted() == ["o3", "o2"]
    (on_pod,) = [e for e in w.events("Evicted") if e["regarding"]["name"] == "o3"]
    assert on_pod["type"] == "Warning" and f"PodGroup {NS}/wait" in on_pod["note"]
    assert on_pod["related"]["name"] == "wait"
    groups = {e["regarding"]["name"]: e["note"] for e in w.events("EvictedOverused")}
    assert set(groups) == {"wait", "over"}
    assert "o3, o2" in groups["wait"] and "keeps its minimum" in groups["over"]
    # Evicted a moment ago, still in the cache: counted as leaving, nobody else is evicted.
    w.reconciler.reconcile(NS, "wait")
    assert w.evicted() == ["o3", "o2"]


def test_no_eviction_without_the_flag_across_namespaces_or_when_it_would_not_suffice():
    groups = over_and_wait()
    off = World(overused(), groups, evict=False)
    off.reconciler.reconcile(NS, "wait")
    assert off.evicted() == []
    # Another namespace's surplus is never taken.
    apart = World(
        overused(ns="other"),
        [cpu_podgroup("over", "1", namespace="other", phase="Running", resource_version="1"), groups[1]],
    )
    apart.reconciler.reconcile(NS, "wait")
    assert apart.evicted() == []
    # Four cpu lacking, three surplus: evicting them would not let it in, so nothing is.
    greedy = World(
        overused(),
        [groups[0], cpu_podgroup("wait", "4", namespace=NS, phase="Pending", resource_version="1")],
    )
    greedy.reconciler.reconcile(NS, "wait")
    assert greedy.evicted() == []
    # A group at its minimum has no surplus.
    full = World(
        overused(),
        [
            cpu_podgroup("over", "4", namespace=NS, phase="Running", resource_version="1", min_member=4),
            groups[1],
        ],
    )
    full.reconciler.reconcile(NS, "wait")
    assert full.evicted() == []


@pytest.mark.parametrize("label", [OPT_OUT_LABEL, YUNIKORN_OPT_OUT_LABEL])
def test_an_opted_out_member_is_kept_and_counts_towards_the_minimum(label):
    labels = {"o3": {label: "false"}}
    w = World(overused(labels=labels), over_and_wait("3"))
    w.reconciler.reconcile(NS, "wait")
    assert w.evicted() == ["o2", "o1", "o0"]  # o3 is kept: the group keeps its minimum with it
    # Soft mode: opted-out members go last, so the same three are chosen here.
    soft = World(overused(labels=labels), over_and_wait(), mode="soft")
    soft.reconciler.reconcile(NS, "wait")
    assert soft.evicted() == ["o2", "o1"]


def test_a_pdb_refusal_passes_the_member_over_and_others_are_chosen_next_time():
    w = World(overused(), over_and_wait())
    original = w.client.request
    refused = []

    def pdb(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if path.endswith("/o3/eviction"):
            refused.append(path)
            raise ApiError(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        return original(method, path, **kw)

    w.client.request = pdb  # type: ignore[method-assign]
    w.reconciler.reconcile(NS, "wait")
    # o3 refused: nothing else is evicted on that choice; the next one passes o3 over.
    assert len(refused) == 1 and w.evicted() == []
    (blocked,) = w.events("EvictionBlocked")
    assert blocked["note"].startswith("a PodDisruptionBudget does not allow evicting o3")
    w.reconciler.reconcile(NS, "wait")
    assert w.evicted() == ["o2", "o1"] and len(refused) == 1
    # o2 and o1 count as leaving: nothing more, not even once o3's pass-over has expired.
    w.clock += 31
    w.reconciler.reconcile(NS, "wait")
    assert w.evicted() == ["o2", "o1"] and len(refused) == 1


def test_a_higher_priority_member_or_group_is_never_taken():
    pods = overused()
    for p in pods:
        p["spec"]["priority"] = 5
    w = World(pods, over_and_wait())
    w.reconciler.reconcile(NS, "wait")
    assert w.evicted() == []
