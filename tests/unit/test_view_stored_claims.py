"""ClusterView.stored_podgroups: the cached groups' claims, as listing_of makes them, kept
between the cache's changes for the objects the cache still holds, and never stale."""

from __future__ import annotations

import datetime as dt

from priogate.ledger.stored_groups import listing_of
from tests.builders import cpu_podgroup
from tests.reviews import make_view

NS = "team-a"
MINIMUM = dt.datetime.min.replace(tzinfo=dt.UTC)


def as_listed(view) -> dict:
    return dict(listing_of(view.caches["podgroups"].namespace(NS).values(), MINIMUM).groups)


def test_the_claims_follow_every_change_and_reuse_what_did_not_change():
    view = make_view(
        podgroups=[
            cpu_podgroup("a", "1", namespace=NS, resource_version="1"),
            cpu_podgroup("b", "2", namespace=NS, resource_version="2"),
            cpu_podgroup("c", "3", namespace=NS, resource_version="3"),
        ]
    )
    first = dict(view.stored_podgroups(NS))
    assert first == as_listed(view)
    cache = view.caches["podgroups"]
    cache.apply_event("MODIFIED", cpu_podgroup("b", "5", namespace=NS, resource_version="4"))  # raised
    cache.apply_event("DELETED", cpu_podgroup("c", "3", namespace=NS, resource_version="5"))
    cache.apply_event("ADDED", cpu_podgroup("d", "1", namespace=NS, resource_version="6"))
    unreadable = cpu_podgroup("bad", "1", namespace=NS, resource_version="7", min_member=-1)
    cache.apply_event("ADDED", unreadable)  # reserves nothing
    now = dict(view.stored_podgroups(NS))
    assert now == as_listed(view)
    assert set(now) == {"uid-a", "uid-b", "uid-d"}
    assert now["uid-b"].min_resources == {"cpu": "5"}
    assert now["uid-a"] is first["uid-a"]  # the same object in the cache: its claim reused


def test_an_unchanged_cache_answers_the_same_mapping():
    view = make_view(podgroups=[cpu_podgroup("a", "1", namespace=NS, resource_version="1")])
    assert view.stored_podgroups(NS) is view.stored_podgroups(NS)


def test_followed_from_the_start_the_claims_come_from_the_first_list_and_the_events_after():
    """The quota server follows the stored groups when its caches start (webhook.server
    build_view), before its podgroups cache has listed anything: the LIST and the events after
    it make the claims, and the first admission reads them with no fill of its own."""
    view = make_view(synced=False)
    followed = view.follow_stored_groups()
    assert dict(view.stored_podgroups(NS)) == {}
    cache = view.caches["podgroups"]
    listed = [cpu_podgroup(name, "1", namespace=NS, resource_version=str(i)) for i, name in enumerate("ab")]
    cache.replace_all(listed, "2")
    cache.apply_event("ADDED", cpu_podgroup("c", "2", namespace=NS, resource_version="3"))
    assert view.follow_stored_groups() is followed  # followed once
    assert set(view.stored_podgroups(NS)) == {"uid-a", "uid-b", "uid-c"}
    assert dict(view.stored_podgroups(NS)) == as_listed(view)
