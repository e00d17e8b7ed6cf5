"""Each program's caches watch what they always watched, under the same names, keeping the same
parts of each object; and a cache's per-object callback reports every change as the controller
needs it."""

from __future__ import annotations

from priogate.kube.cache import WatchCache
from priogate.slim import group_member_essentials, namespace_labels, slim_node, slim_pod

LEDGER_SELECTOR = ("labelSelector", "priogate.io/ledger=podgroup-ledger")
UNFINISHED = ("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")


def describe(cache: WatchCache) -> tuple:
    return cache.name, cache.path, tuple(cache.selectors), cache.transform


def test_the_webhook_caches():
    from webhook.view import CACHES

    built = {name: source.cache(None, transform=transform) for name, (source, transform) in CACHES.items()}  # type: ignore[arg-type]
    assert {name: describe(cache) for name, cache in built.items()} == {
        "priorityclasses": ("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses", (), None),
        "resourcequotas": ("resourcequotas", "/api/v1/resourcequotas", (), None),
        "podgroups": ("podgroups", "/apis/scheduling.volcano.sh/v1beta1/podgroups", (), None),
        "ledgers": ("ledgers", "/api/v1/namespaces/priogate-system/configmaps", (LEDGER_SELECTOR,), None),
        "pods": ("pods", "/api/v1/pods", (UNFINISHED,), group_member_essentials),
        # A namespace's default PriorityClass (priogate.namespace_default), for the priority hooks.
        "namespaces": ("namespaces", "/api/v1/namespaces", (), namespace_labels),
        # the preemption preview's (webhook/preview_state.py): what the controller keeps
        "preemption-pods": ("preemption-pods", "/api/v1/pods", (), slim_pod),
        "nodes": ("nodes", "/api/v1/nodes", (), slim_node),
        "pdbs": ("pdbs", "/apis/policy/v1/poddisruptionbudgets", (), None),
    }


def test_the_controller_caches():
    from controller.caches import build_caches

    caches = build_caches(None, lambda *_: None)  # type: ignore[arg-type]
    assert [describe(c) for c in caches.all()] == [
        ("podgroups", "/apis/scheduling.volcano.sh/v1beta1/podgroups", (), None),
        ("pods", "/api/v1/pods", (), slim_pod),
        ("resourcequotas", "/api/v1/resourcequotas", (), None),
        ("nodes", "/api/v1/nodes", (), slim_node),
        ("ledgers", "/api/v1/namespaces/priogate-system/configmaps", (LEDGER_SELECTOR,), None),
        ("pdbs", "/apis/policy/v1/poddisruptionbudgets", (), None),
        ("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses", (), None),
        ("namespaces", "/api/v1/namespaces", (), namespace_labels),
    ]
    routed = [(c.name, c.on_event is not None) for c in caches.all()]
    assert [name for name, called in routed if called] == [
        "podgroups",
        "pods",
        "resourcequotas",
        "nodes",
        "ledgers",
        "priorityclasses",
        "namespaces",
    ]


def pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns", "managedFields": [{"manager": "x"}]},
        "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "b"}]}]},
        "status": {"phase": "Running"},
    }


def test_the_callback_sees_each_change_after_the_cache_holds_it():
    seen: list[tuple[str, str, bool]] = []
    cache = WatchCache(None, "", "pods", transform=slim_pod)  # type: ignore[arg-type]

    def record(event_type: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        seen.append((event_type, name, cache.get("ns", name) is not None))

    cache.on_event = record
    a, b = pod("a"), pod("b")
    cache.apply_event("ADDED", a)
    cache.apply_event("BOOKMARK", {"metadata": {"resourceVersion": "5"}})
    cache.apply_event("DELETED", pod("never-stored"))
    assert seen == [("ADDED", "a", True), ("DELETED", "never-stored", False)]
    assert "managedFields" not in cache.get("ns", "a")["metadata"]

    seen.clear()
    cache.replace_all([b], "9")  # a was deleted while the watch was down
    assert seen == [("DELETED", "a", False), ("SYNC", "b", True)]


def test_the_callback_gets_the_object_as_the_server_sent_it():
    got: list[dict] = []
    cache = WatchCache(None, "", "pods", transform=slim_pod, on_event=lambda _t, obj: got.append(obj))  # type: ignore[arg-type]
    a = pod("a")
    cache.apply_event("MODIFIED", a)
    cache.replace_all([a], "2")
    assert got == [a, a] and got[0] is a
