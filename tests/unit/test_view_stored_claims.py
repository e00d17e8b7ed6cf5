"""ClusterView.stored_podgroups: the cached groups' claims, as listing_of makes them, kept
between the cache's changes for the objects the cache still holds, and never stale."""

from __future__ import annotations

import datetime as dt

from priogate.ledger.stored_groups import listing_of
from tests.builders import make_view, podgroup

NS = "team-a"
MINIMUM = dt.datetime.min.replace(tzinfo=dt.UTC)


def group(name: str, cpu: str, rv: str, **spec: object) -> dict:
    obj = podgroup(name, namespace=NS, min_member=1, min_resources={"cpu": cpu})
    obj["metadata"]["resourceVersion"] = rv
    obj["spec"].update(spec)
    return obj


def as_listed(view) -> dict:
    return dict(listing_of(view.caches["podgroups"].namespace(NS).values(), MINIMUM).groups)


def test_the_claims_follow_every_change_and_reuse_what_did_not_change():
    view = make_view(podgroups=[group("a", "1", "1"), group("b", "2", "2"), group("c", "3", "3")])
    first = dict(view.stored_podgroups(NS))
    assert first == as_listed(view)
    cache = view.caches["podgroups"]
    cache.apply_event("MODIFIED", group("b", "5", "4"))  # raised
    cache.apply_event("DELETED", group("c", "3", "5"))
    cache.apply_event("ADDED", group("d", "1", "6"))
    cache.apply_event("ADDED", group("bad", "1", "7", minMember=-1))  # unreadable: reserves nothing
    now = dict(view.stored_podgroups(NS))
    assert now == as_listed(view)
    assert set(now) == {"uid-a", "uid-b", "uid-d"}
    assert now["uid-b"].min_resources == {"cpu": "5"}
    assert now["uid-a"] is first["uid-a"]  # the same object in the cache: its claim reused


def test_an_unchanged_cache_answers_the_same_mapping():
    view = make_view(podgroups=[group("a", "1", "1")])
    assert view.stored_podgroups(NS) is view.stored_podgroups(NS)
