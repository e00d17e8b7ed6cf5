"""OverQuota keeps each namespace's reservations summed across changes; after every change its
answer is the one a fresh sum over the stored groups gives (priogate.quota.over_reserved)."""

from __future__ import annotations

import contextlib
import copy
import random

from controller.caches import Caches
from controller.over_quota import OverQuota
from priogate.kube.cache import WatchCache
from priogate.ledger.stored_groups import entry_of_group
from priogate.quota import over_reserved
from tests.builders import podgroup, resource_quota


def fresh_answer(caches: Caches, namespace: str) -> str | None:
    reservations = []
    for group in caches.podgroups.namespace(namespace).values():
        with contextlib.suppress(ValueError, TypeError):
            reservations.append(entry_of_group(group, "").reservation())
    if not reservations:
        return None
    try:
        return over_reserved(caches.quotas.namespace(namespace).values(), reservations)
    except ValueError:
        return None


def test_kept_sums_answer_as_a_fresh_sum_after_every_change():
    rng = random.Random(3)
    caches = Caches(
        **{name: WatchCache.static(name, []) for name in ("podgroups", "pods", "quotas", "nodes", "ledgers")},
        pdbs=WatchCache.static("pdbs", []),
        classes=WatchCache.static("classes", []),
    )
    kept = OverQuota(caches)
    gold = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["gold"]}]}
    answers = set()
    for step in range(400):
        ns = rng.choice(["a", "b"])
        name = f"g{rng.randint(0, 12)}"
        roll = rng.random()
        if roll < 0.1:
            hard = {"cpu": str(rng.randint(0, 12)), "pods": str(rng.randint(0, 20))}
            quota = resource_quota("q", namespace=ns, hard=hard)
            caches.quotas.apply_event("MODIFIED", quota)
            caches.quotas.apply_event(
                "MODIFIED",
                resource_quota(
                    "gold", namespace=ns, hard={"cpu": str(rng.randint(0, 6))}, scope_selector=gold
                ),
            )
        elif roll < 0.25 and caches.podgroups.get(ns, name) is not None:
            caches.podgroups.apply_event("DELETED", caches.podgroups.get(ns, name))
        elif roll < 0.4 and caches.podgroups.get(ns, name) is not None:  # delivered again, as decoded anew
            caches.podgroups.apply_event("MODIFIED", copy.deepcopy(caches.podgroups.get(ns, name)))
        else:
            cpu = rng.choice(["1", "500m", "2", "-1", "x"])  # a malformed one is not read
            group = podgroup(
                name,
                namespace=ns,
                min_member=rng.randint(0, 3),
                min_resources={"cpu": cpu},
                priority_class=rng.choice(["gold", "", None]),
                phase=rng.choice(["Pending", "Inqueue", None]),
                resource_version=str(step),
            )
            caches.podgroups.apply_event("MODIFIED", group)
        for namespace in ("a", "b"):
            answer = kept.answer(namespace)
            assert answer == fresh_answer(caches, namespace), step
            answers.add(answer is None)
    assert answers == {True, False}  # both answers are exercised
