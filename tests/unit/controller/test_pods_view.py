"""NamespacePods moved by what changed reads as one read afresh: the same members (the same
objects, in the cache's order), bound pods and sums by priority, after every change."""

from __future__ import annotations

import random

from controller.pods_view import NamespacePods
from priogate.kube.cache import WatchCache
from tests.builders import pod


def test_moved_by_changes_equals_a_fresh_read():
    rng = random.Random(11)
    cache = WatchCache.static("pods", [])
    kept = None
    uids = 0
    for step in range(600):
        name = f"p{rng.randint(0, 30)}"
        current = cache.get("ns", name)
        roll = rng.random()
        if roll < 0.02:  # a relist: the same pods, in another order, each decoded anew
            objects = [dict(p) for p in cache.items()]
            rng.shuffle(objects)
            cache.replace_all(objects, str(step))
        elif roll < 0.15 and current is not None:
            cache.apply_event("DELETED", current)
        elif roll < 0.25 and current is not None:  # delivered again, the same version
            cache.apply_event("MODIFIED", dict(current))
        else:
            uids += current is None
            obj = pod(
                name,
                namespace="ns",
                cpu=rng.choice(["1", "500m", "2"]),
                priority=rng.choice([0, 10, 100]),
                node=rng.choice([None, "n1"]),
                phase=rng.choice([None, "Running", "Succeeded"]),
                group=rng.choice([None, "a", "b", "a"]) if current is None or rng.random() < 0.1 else None,
            )
            if current is not None and rng.random() < 0.9:  # most changes keep the group
                obj["metadata"]["annotations"] = current["metadata"].get("annotations", {})
            obj["metadata"]["uid"] = current["metadata"]["uid"] if current is not None else f"u{uids}"
            obj["metadata"]["resourceVersion"] = str(step)
            cache.apply_event("MODIFIED", obj)
        seen = cache.namespace("ns")
        kept = NamespacePods.read(seen, kept)
        fresh = NamespacePods.read(seen, None)
        assert kept.bound == fresh.bound, step
        assert kept.per_priority == {p: s for p, s in fresh.per_priority.items()} or _same_sums(
            kept.per_priority, fresh.per_priority
        ), step
        assert {g: [id(p) for p in m] for g, m in kept.members.items()} == {
            g: [id(p) for p in m] for g, m in fresh.members.items()
        }, step


def _same_sums(a: dict, b: dict) -> bool:
    """Sums equal, a priority or resource whose sum went back to 0 counting as absent."""

    def nonzero(sums: dict) -> dict:
        out = {p: {n: v for n, v in s.items() if v} for p, s in sums.items()}
        return {p: s for p, s in out.items() if s}

    return nonzero(a) == nonzero(b)
