"""Quota fences through the real LedgerStore and the quota hook (webhook.rules.quota_fence)
against an in-memory API server: a change written into the ledger before it is stored limits
the PodGroups that follow it, whatever a replica's cache shows; past the in-flight bound a
quorum GET decides whether it still counts; the ledger keeps every fence until it expires."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import orjson
import pytest

from priogate import clock
from priogate.kube.client import ApiError
from priogate.ledger.codec import ledger_object, ledger_of
from priogate.ledger.model import stamp
from priogate.ledger.timing import FENCE_TTL
from tests.builders import resource_quota
from tests.fake_api import FakeApi
from tests.reviews import fed_cache, review
from tests.unit.ledger_world import LEDGER, NS, QUOTAS, admit_group, setup
from webhook.objects import MalformedObject
from webhook.review import parse_review
from webhook.rules import quota_fence
from webhook.view import CacheView


def change_quota(api: FakeApi, view, cpu: str, *, cached: bool = False, dry_run: bool = False):
    """What kube-apiserver does with an update of the quota "compute": the quota hook first,
    then storage; the cache hears of it only when `cached`. Returns the hook's answer."""
    path = f"{QUOTAS}/compute"
    old = api.objects[path]
    new = {**old, "spec": {"hard": {"cpu": cpu}}}
    answer = quota_fence.admit(parse_review(orjson.dumps(quota_review(new, old, dry_run))), view)
    if answer.allowed and not dry_run:
        stored = api.put_object(QUOTAS, new)
        if cached:
            view.caches["resourcequotas"].apply_event("MODIFIED", stored)
    return answer


def quota_review(new: dict, old: dict | None, dry_run: bool = False) -> dict:
    operation = "UPDATE" if old else "CREATE"
    body = review(new, operation=operation, old=old, resource="resourcequotas", dry_run=dry_run)
    body["request"]["kind"] = {"group": "", "version": "v1", "kind": "ResourceQuota"}
    body["request"]["resource"] = {"group": "", "version": "v1", "resource": "resourcequotas"}
    return body


def cached_quota_setup(quota_cpu: str = "10"):
    """The quota stored and cached, and the namespace's ledger written (the usual state)."""
    api, view = setup(quota_cpu)
    quota = api.objects[f"{QUOTAS}/compute"]
    quota["metadata"]["uid"] = "uid-compute"
    view.caches["resourcequotas"].apply_event("ADDED", quota)
    assert admit_group(view, "base", "0").allowed
    return api, view


def test_a_quota_lowered_before_the_request_limits_it_though_the_cache_has_not_seen_it():
    """The quota hook writes the change into the ledger before kube-apiserver stores it; the
    cache still says cpu=10, the API server cpu=4: the ledger's fence limits "a" (6)."""
    api, view = cached_quota_setup()
    assert change_quota(api, view, "4").allowed
    refused = admit_group(view, "a", "6")
    assert not refused.allowed and "limited: cpu=4" in refused.message
    assert admit_group(view, "b", "4").allowed  # nothing refused holds the quota


def test_a_quota_raised_counts_once_the_cache_shows_it():
    api, view = cached_quota_setup("4")
    assert change_quota(api, view, "10").allowed  # the cache has not heard: cpu=4 still limits
    assert not admit_group(view, "a", "6").allowed
    view.caches["resourcequotas"].apply_event("MODIFIED", api.objects[f"{QUOTAS}/compute"])
    assert admit_group(view, "a", "6").allowed  # the fence is superseded by the cached version


def test_the_ledger_keeps_a_fence_another_replicas_cache_still_needs():
    """Replica A's cache has seen the lowered quota; replica B's has not. A's next fence write
    must not drop the first fence: B decides on it."""
    api, view_a = cached_quota_setup()
    assert change_quota(api, view_a, "4", cached=True).allowed
    assert change_quota(api, view_a, "5", cached=True).allowed  # A's cache shows both ended
    assert len(ledger_of(api.objects[LEDGER]).fences) == 3  # the ledger's rebuild, 4 and 5
    view_b = CacheView(
        {**view_a.caches, "resourcequotas": fed_cache("resourcequotas", [])},
        view_a.ledger_store,
        in_flight=view_a.in_flight,
    )
    view_b.caches["resourcequotas"].apply_event(
        "ADDED",
        {
            **api.objects[f"{QUOTAS}/compute"],
            "spec": {"hard": {"cpu": "10"}},
            "metadata": {**api.objects[f"{QUOTAS}/compute"]["metadata"], "resourceVersion": "1"},
        },
    )
    refused = admit_group(view_b, "a", "6")
    assert not refused.allowed and "limited: cpu=4" in refused.message


def test_a_quota_change_drops_the_expired_fences_and_no_others():
    api, view = cached_quota_setup()
    assert change_quota(api, view, "4", cached=True).allowed
    obj = api.objects[LEDGER]
    ledger = ledger_of(obj)
    old = dt.datetime.now(dt.UTC) - FENCE_TTL - dt.timedelta(seconds=1)
    aged_fences = {k: replace(f, at=stamp(old)) for k, f in ledger.fences.items()}
    version = obj["metadata"]["resourceVersion"]
    api.request(
        "PUT", LEDGER, body=ledger_object("priogate-system", NS, ledger.with_fences(aged_fences), version)
    )
    assert change_quota(api, view, "5", cached=True).allowed
    assert [f.spec for f in ledger_of(api.objects[LEDGER]).fences.values()] == [{"hard": {"cpu": "5"}}]


def test_two_changes_of_one_quota_both_limit_until_the_cache_shows_what_became_of_them():
    """Admitted as 3 then 10 on the same version, stored in either order: both count."""
    api, view = cached_quota_setup()
    old = api.objects[f"{QUOTAS}/compute"]
    for cpu in ("3", "10"):
        new = {**old, "spec": {"hard": {"cpu": cpu}}}
        assert quota_fence.admit(parse_review(orjson.dumps(quota_review(new, old))), view).allowed
    refused = admit_group(view, "a", "4")
    assert not refused.allowed and "limited: cpu=3" in refused.message


def test_a_quota_created_before_the_request_limits_it_though_the_cache_has_not_seen_it():
    api, view = cached_quota_setup()
    new = resource_quota("small", hard={"cpu": "2"}, namespace=NS)
    new["metadata"]["uid"] = "uid-small"
    assert quota_fence.admit(parse_review(orjson.dumps(quota_review(new, None))), view).allowed
    refused = admit_group(view, "a", "3")
    assert not refused.allowed and "exceeded quota: small" in refused.message
    view.caches["resourcequotas"].apply_event("ADDED", api.put_object(QUOTAS, new))
    assert admit_group(view, "a", "2").allowed  # once cached, the create's fence ends: 2 fits


def age_fences(api: FakeApi, seconds: float) -> None:
    obj = api.objects[LEDGER]
    ledger = ledger_of(obj)
    older = {
        k: replace(f, at=stamp(clock.parse_time(f.at) - dt.timedelta(seconds=seconds)))
        for k, f in ledger.fences.items()
    }
    version = obj["metadata"]["resourceVersion"]
    api.request("PUT", LEDGER, body=ledger_object("priogate-system", NS, ledger.with_fences(older), version))


def test_a_forged_quota_change_refuses_for_the_in_flight_bound_at_most():
    """An AdmissionReview posted straight to the webhook, lowering the quota on its real current
    version, is never stored: past the in-flight bound one quorum GET shows the quota still at
    that version, and the fence counts no more."""
    api, view = cached_quota_setup()
    assert change_quota(api, view, "1").allowed
    api.objects[f"{QUOTAS}/compute"] = view.resource_quotas(NS)[0]  # storage never had it
    assert not admit_group(view, "a", "6").allowed  # within the bound: it may be on its way
    age_fences(api, view.in_flight.total_seconds() + 1)
    reads = len(api.reads_of(f"{QUOTAS}/compute"))
    assert admit_group(view, "a", "6").allowed
    assert len(api.reads_of(f"{QUOTAS}/compute")) == reads + 1  # one quorum GET


def test_a_stored_change_the_cache_has_not_shown_for_the_bound_still_counts():
    api, view = cached_quota_setup()
    assert change_quota(api, view, "4").allowed  # stored; the cache lags
    age_fences(api, view.in_flight.total_seconds() + 1)
    refused = admit_group(view, "a", "6")
    assert not refused.allowed and "limited: cpu=4" in refused.message


@pytest.mark.parametrize(
    "spec", [{"hard": {"cpu": "lots"}}, {"hard": "not a map"}], ids=["bad quantity", "bad hard"]
)
def test_a_quota_the_ledger_could_not_read_back_is_refused_as_malformed(spec):
    api, view = cached_quota_setup()
    before = api.objects[LEDGER]["metadata"]["resourceVersion"]
    new = {**api.objects[f"{QUOTAS}/compute"], "spec": spec}
    body = quota_review(new, api.objects[f"{QUOTAS}/compute"])
    with pytest.raises(MalformedObject, match="not a ResourceQuota priogate can record"):  # a 400
        quota_fence.admit(parse_review(orjson.dumps(body)), view)
    assert api.objects[LEDGER]["metadata"]["resourceVersion"] == before


def test_a_dry_run_quota_change_writes_nothing():
    api, view = cached_quota_setup()
    writes = len(api.writes)
    assert change_quota(api, view, "1", dry_run=True).allowed
    assert len(api.writes) == writes
    assert admit_group(view, "a", "6").allowed


def test_a_quota_change_the_ledger_cannot_take_is_refused_with_retry():
    api, view = cached_quota_setup()

    def unavailable(*_: Any, **__: Any) -> dict:
        raise ApiError(500, "InternalError", "etcd leader changed")

    api.request = unavailable  # type: ignore[method-assign]
    answer = change_quota(api, view, "4")
    assert not answer.allowed and answer.code == 503 and "retry" in answer.message
    assert "ResourceQuota compute" in answer.message


def test_a_podgroup_admission_reads_no_quota_where_the_ledger_exists():
    api, view = cached_quota_setup()
    reads = len(api.reads_of(QUOTAS))
    assert admit_group(view, "a", "6").allowed
    assert len(api.reads_of(QUOTAS)) == reads
    assert len(api.writes) == 2  # base, then a: each decided once
