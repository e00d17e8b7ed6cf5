"""The ledger through the real LedgerStore against an in-memory API server: where it
lives, its rebuild from a quorum LIST when missing or damaged, the quorum confirmation before a
refusal, in-flight entries kept, and pods serialized through it.

What the old code did in each case is said where it differs: it kept the ledger in the
tenant's namespace, read a missing ledger as empty (admitting everything again), released at
DELETE admission, and answered an unreadable ledger with a 503 until someone repaired it.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time
import zlib

import orjson

from priogate.ledger.codec import entries_of, ledger_of, ledger_path
from tests.builders import pod, podgroup
from tests.fake_api import FakeApi
from tests.reviews import fed_cache, group_review, review
from tests.unit.ledger_world import GROUPS, LEDGER, NS, QUOTAS, admit_group, aged, setup, store_group
from webhook.review import parse_review
from webhook.rules import pod_quota, podgroup_quota


def test_the_ledger_lives_in_priogates_namespace_and_a_rebuilt_one_fences_the_listed_quotas():
    api, view = setup()
    assert admit_group(view, "a", "6").allowed
    assert set(entries_of(api.objects[LEDGER])) == {"uid-a"}
    assert not any("/namespaces/team-a/configmaps" in call.path for call in api.calls)
    # The quota was not in the cache (old code: no limit). The ledger was missing, so it was
    # rebuilt with the quotas of a LIST without a resourceVersion (a quorum read) as fences.
    assert api.reads_of(QUOTAS) == [()]
    assert [f.quota for f in ledger_of(api.objects[LEDGER]).fences.values()] == ["compute"]
    refused = admit_group(view, "b", "5")
    assert not refused.allowed and "exceeded quota: compute" in refused.message


def test_a_missing_ledger_is_rebuilt_from_the_stored_groups_before_deciding():
    """Old code: a missing ledger read as empty, so the next group was admitted over quota."""
    api, view = setup()
    view.caches["resourcequotas"].apply_event("ADDED", api.objects[f"{QUOTAS}/compute"])
    store_group(api, "a", "6")  # stored, and its ledger deleted by someone
    refused = admit_group(view, "b", "5")
    assert not refused.allowed and "reserved: cpu=6" in refused.message
    assert api.reads_of(GROUPS) == [()]  # one quorum LIST
    assert set(entries_of(api.objects[LEDGER])) == {"uid-a"}  # and the rebuild was written


def test_a_damaged_ledger_is_rebuilt_not_a_500_or_a_503():
    api, view = setup()
    store_group(api, "a", "6")
    api.put_object(
        ledger_path("priogate-system"),
        {"metadata": {"name": f"podgroup-ledger.{NS}"}, "data": {"reservations.json": "{oops"}},
    )
    refused = admit_group(view, "b", "5")
    assert not refused.allowed and refused.code == 403 and "reserved: cpu=6" in refused.message
    assert admit_group(view, "c", "4").allowed
    assert set(entries_of(api.objects[LEDGER])) == {"uid-a", "uid-c"}


def test_an_entry_in_flight_is_never_dropped():
    """Another replica admitted "a" a moment ago; it is not stored yet. A LIST does not show it,
    and dropping it would over-admit: "b", which fits only without it, waits for its fate and,
    when its own deadline comes first, is refused with 'retry'; "a" keeps its claim."""
    api, view = setup(in_flight=15.0)
    assert admit_group(view, "a", "6").allowed  # not stored: still in flight
    started = time.monotonic()
    refused = admit_group(view, "b", "5", within=4.0)
    assert not refused.allowed and "may still be on their way to storage, retry" in refused.message
    assert time.monotonic() - started < 4.0  # answered within the request's deadline
    assert len(api.reads_of(GROUPS)) > 2  # looked again while waiting
    assert "uid-a" in entries_of(api.objects[LEDGER])


def test_an_admission_blocked_by_a_claim_never_stored_waits_for_its_bound_and_goes_through():
    """A forged CREATE (an invented uid, posted to an endpoint without mTLS) or one a later
    admission step refused: its claim is never stored. The admission it blocks is not refused;
    it waits until the claim's in-flight bound has passed, then a LIST ends the claim and it
    goes through: nothing is blocked for more than that one admission's wait. Old code: "b" was
    refused, and so was every admission for the whole bound."""
    api, view = setup(in_flight=1.5)
    assert admit_group(view, "ghost", "6", uid="invented-uid").allowed
    started = time.monotonic()
    assert admit_group(view, "b", "5", within=10.0).allowed
    assert 1.0 < time.monotonic() - started < 4.0
    assert set(entries_of(api.objects[LEDGER])) == {"uid-b"}


def test_a_waiting_admission_is_refused_once_the_blocking_claim_is_stored():
    """The real case behind the wait: "a" is stored a moment after its admission, and "b",
    waiting for it, is refused at once, well before the bound, without over-admitting."""
    api, view = setup(in_flight=15.0)
    assert admit_group(view, "a", "6").allowed
    timer = threading.Timer(0.5, store_group, (api, "a", "6"))
    timer.start()
    started = time.monotonic()
    refused = admit_group(view, "b", "5", within=10.0)
    timer.join()
    assert not refused.allowed and "reserved: cpu=6" in refused.message
    assert "retry" not in refused.message
    assert time.monotonic() - started < 3.0
    assert set(entries_of(api.objects[LEDGER])) == {"uid-a"}


def test_a_refusal_for_claims_the_watch_cache_shows_stored_costs_no_quorum_list():
    """At a full quota every refusal meets claims admitted moments ago. Those the watch cache
    shows stored are real: the refusal needs no LIST of every group (old code: one per
    refusal while any claim was in flight)."""
    api, view = setup(in_flight=15.0)
    assert admit_group(view, "a", "6").allowed
    view.caches["podgroups"].apply_event("ADDED", store_group(api, "a", "6", uid="uid-a"))
    lists_before = len(api.reads_of(GROUPS))
    refused = admit_group(view, "b", "5", within=10.0)
    assert not refused.allowed and "reserved: cpu=6" in refused.message
    assert len(api.reads_of(GROUPS)) == lists_before


def test_a_claim_the_cache_has_not_seen_yet_is_awaited_through_the_cache():
    """The group "a" is stored, and the watch cache hears of it 0.3 s after its admission: "b" waits for
    the cache, not for LISTs, and is refused once the cache shows "a"."""
    api, view = setup(in_flight=15.0)
    assert admit_group(view, "a", "6").allowed
    stored = store_group(api, "a", "6", uid="uid-a")
    timer = threading.Timer(0.3, view.caches["podgroups"].apply_event, ("ADDED", stored))
    timer.start()
    lists_before = len(api.reads_of(GROUPS))
    started = time.monotonic()
    refused = admit_group(view, "b", "5", within=10.0)
    timer.join()
    assert not refused.allowed and "reserved: cpu=6" in refused.message
    assert time.monotonic() - started < 1.0
    assert len(api.reads_of(GROUPS)) == lists_before


def test_once_the_cache_shows_the_awaited_claim_the_stored_groups_refuse_without_another_turn():
    """As above, with the quota in the cache too: "b" waits through one turn, and once the cache
    shows "a" stored, the stored groups alone leave "b" no room. That refusal is the turn's own
    (the ledger then holds nothing beyond the stored groups), so no second turn is taken."""
    api, view = setup(in_flight=15.0)
    view.caches["resourcequotas"].apply_event("ADDED", api.objects[f"{QUOTAS}/compute"])
    assert admit_group(view, "a", "6").allowed
    stored = store_group(api, "a", "6", uid="uid-a")
    timer = threading.Timer(0.3, view.caches["podgroups"].apply_event, ("ADDED", stored))
    timer.start()
    reads_before = len(api.reads_of(LEDGER))
    refused = admit_group(view, "b", "5", within=10.0)
    timer.join()
    assert not refused.allowed and "reserved: cpu=6" in refused.message
    assert len(api.reads_of(LEDGER)) == reads_before + 1
    assert set(entries_of(api.objects[LEDGER])) == {"uid-a"}


def test_a_gone_or_forged_entry_is_confirmed_with_one_quorum_list_and_dropped():
    """An entry past the in-flight bound whose group no LIST holds (deleted, refused by a later
    step, or a forged CREATE's invented uid) blocks nobody: one LIST confirms, it is dropped."""
    api, view = setup()
    assert admit_group(view, "ghost", "6", uid="invented-uid").allowed
    aged(api, 60)
    lists_before = len(api.reads_of(GROUPS))
    assert admit_group(view, "b", "10").allowed
    assert len(api.reads_of(GROUPS)) == lists_before + 1
    assert set(entries_of(api.objects[LEDGER])) == {"uid-b"}


def test_a_finalizer_held_group_reserves_until_gone():
    api, view = setup()
    assert admit_group(view, "a", "6").allowed
    store_group(api, "a", "6", deletionTimestamp="2026-11-22T11:59:00Z", finalizers=["example.com/hold"])
    aged(api, 60)
    refused = admit_group(view, "b", "10")
    assert not refused.allowed and "reserved: cpu=6" in refused.message  # confirmed still stored
    api.remove(f"{GROUPS}/a")  # the finalizer is removed: really gone
    assert admit_group(view, "b", "10").allowed


def test_a_delete_admission_releases_nothing():
    """Old code: a DELETE review (forged, or for a finalizer-held group) dropped the entry."""
    api, view = setup()
    assert admit_group(view, "a", "6").allowed
    body = group_review(None, operation="DELETE", old=podgroup("a", namespace=NS, min_resources={"cpu": "6"}))
    body["request"]["name"] = "a"
    assert podgroup_quota.admit(parse_review(orjson.dumps(body)), view).allowed
    assert "uid-a" in entries_of(api.objects[LEDGER])
    assert "DELETE" not in podgroup_quota.RULE_SET.operations


def test_a_shrinking_update_lowers_nothing_until_stored():
    """Old code: the entry was lowered at admission and stayed low if a later step refused."""
    api, view = setup()
    assert admit_group(view, "a", "6").allowed
    store_group(api, "a", "6")
    old = podgroup("a", namespace=NS, min_member=1, min_resources={"cpu": "6"})
    new = podgroup("a", namespace=NS, min_member=1, min_resources={"cpu": "2"})
    body = group_review(new, operation="UPDATE", old=old)
    assert podgroup_quota.admit(parse_review(orjson.dumps(body)), view).allowed
    assert entries_of(api.objects[LEDGER])["uid-a"].min_resources == {"cpu": "6"}
    aged(api, 60)  # the update was refused later: the stored spec is still 6
    assert not admit_group(view, "b", "5").allowed


def plain_pod(view, i: int, within: float | None = None):
    p = pod(f"p{i}", namespace=NS, cpu="1")
    p["metadata"]["uid"] = f"pod-{i}"
    deadline = None if within is None else time.monotonic() + within
    return pod_quota.admit(parse_review(orjson.dumps(review(p)), deadline), view)


def charge_used(api: FakeApi, cpu: str) -> None:
    """What kube-apiserver's ResourceQuota plugin does once the webhooks have answered."""
    quota = api.objects[f"{QUOTAS}/compute"]
    quota["status"]["used"] = {"cpu": cpu}


def test_pods_are_serialized_and_charged_where_something_is_reserved():
    """hard 10, a group reserving 6 (no member yet): four 1-cpu pods fit, a fifth does not. The
    charges count until the quota's status.used shows the pods (the ResourceQuota plugin
    charges only after the webhooks), so a burst cannot read one stale `used`."""
    group = podgroup("gang", namespace=NS, min_member=1, min_resources={"cpu": "6"})
    api, view = setup(cached_groups=[group])
    api.put_object(GROUPS, group)
    # A burst: every admission before the quota plugin charged any of them.
    assert [plain_pod(view, i, within=3.0).allowed for i in range(6)] == [True] * 4 + [False] * 2
    assert len(ledger_of(api.objects[LEDGER]).charges) == 4
    charge_used(api, "4")  # now charged: the fifth is refused at once, with no wait
    started = time.monotonic()
    refused = plain_pod(view, 4)
    assert not refused.allowed and "retry" not in refused.message
    assert time.monotonic() - started < 1.0


def test_a_pod_blocked_only_by_a_charge_never_stored_waits_for_its_bound_and_goes_through():
    """A forged pod CREATE charged 4 cpu that no pod ever used: the next pod that fits only
    without it waits for the charge's in-flight bound rather than being refused."""
    group = podgroup("gang", namespace=NS, min_member=1, min_resources={"cpu": "6"})
    api, view = setup(cached_groups=[group], in_flight=1.5)
    api.put_object(GROUPS, group)
    forged = pod("ghost", namespace=NS, cpu="4")
    forged["metadata"]["uid"] = "invented"
    assert pod_quota.admit(parse_review(orjson.dumps(review(forged))), view).allowed
    started = time.monotonic()
    assert plain_pod(view, 0, within=10.0).allowed
    assert 1.0 < time.monotonic() - started < 4.0
    assert {c.pod for c in ledger_of(api.objects[LEDGER]).charges.values()} == {"p0"}


def test_a_pod_turn_reads_each_quota_by_a_quorum_get_after_the_ledger_and_no_list():
    """The quota the ledger's fence names is read by name (its status.used fresh); the cache has
    not seen it. A LIST would wait for kube-apiserver's cache; a GET does not."""
    group = podgroup("gang", namespace=NS, min_member=1, min_resources={"cpu": "6"})
    api, view = setup(cached_groups=[group])
    api.put_object(GROUPS, group)
    assert plain_pod(view, 0).allowed  # the first turn rebuilds the ledger: one LIST seeds it
    lists, before = len(api.reads_of(QUOTAS)), len(api.calls)
    charge_used(api, "9")  # 6 reserved + 1 charged + 9 used > 10
    refused = plain_pod(view, 1)
    assert not refused.allowed and "exceeded quota: compute" in refused.message
    assert len(api.reads_of(QUOTAS)) == lists
    gets = [c.path for c in api.calls[before:] if c.method == "GET"]
    assert gets.index(LEDGER) < gets.index(f"{QUOTAS}/compute")


def test_pods_where_nothing_is_reserved_cost_no_api_call():
    api, view = setup()
    p = pod("p", namespace=NS, cpu="100")
    calls = len(api.calls)
    assert pod_quota.admit(parse_review(orjson.dumps(review(p))), view).allowed
    assert len(api.calls) == calls


def test_the_ledger_json_is_what_the_readme_says():
    api, view = setup()
    admit_group(view, "a", "6")
    (packed,) = (v for k, v in api.objects[LEDGER]["data"].items() if k.endswith(".json.zlib.base64"))
    data = json.loads(zlib.decompress(base64.b64decode(packed)))
    assert set(data["uid-a"]) == {
        "group",
        "minResources",
        "minMember",
        "priorityClassName",
        "admittedAt",
        "generation",
    }


def test_the_controller_sweep_adopts_lowers_and_drops_with_a_quorum_list():
    """The sweep makes the ledger true to the stored groups: a stored group the ledger lacks is
    adopted, an entry above its stored spec (a refused growth) is lowered once settled, an entry
    whose group is gone is dropped; an entry in flight is kept and looked at again later."""
    from controller.reclaim import Reclaimer

    api, view = setup()
    for name, cpu in (("kept", "2"), ("grown", "3"), ("gone", "1")):
        assert admit_group(view, name, cpu).allowed
    aged(api, 60)
    assert admit_group(view, "young", "1").allowed  # in flight: not stored yet
    store_group(api, "kept", "2")
    store_group(api, "grown", "1")  # the stored spec is smaller than the entry
    store_group(api, "adopt-me", "2")
    groups = [api.objects[f"{GROUPS}/{n}"] for n in ("kept", "grown", "adopt-me")]

    class Caches:
        ledgers = fed_cache("ledgers", [api.objects[LEDGER]])
        podgroups = fed_cache("podgroups", groups)

    reclaimer = Reclaimer(view.ledger_store, Caches(), dt.timedelta(seconds=15))  # type: ignore[arg-type]
    assert reclaimer.namespaces() == [NS]
    result = reclaimer.reclaim(NS)
    assert result.dropped == ["gone"] and result.adopted == ["adopt-me"] and result.resynced == ["grown"]
    assert result.recheck_after is not None  # "young" is looked at again once past the bound
    got = {e.group: e.min_resources["cpu"] for e in entries_of(api.objects[LEDGER]).values()}
    assert got == {"kept": "2", "grown": "1", "adopt-me": "2", "young": "1"}
    # The fence the rebuilt ledger took from the quota LIST survives the sweep's rewrite.
    assert [f.quota for f in ledger_of(api.objects[LEDGER]).fences.values()] == ["compute"]


def test_a_class_change_counts_both_claims_until_stored():
    api, view = setup(quota_cpu="10")
    assert admit_group(view, "a", "4").allowed
    old = podgroup("a", namespace=NS, min_member=1, min_resources={"cpu": "4"})
    new = podgroup("a", namespace=NS, min_member=1, min_resources={"cpu": "4"}, priority_class="high")
    body = group_review(new, operation="UPDATE", old=old)
    assert podgroup_quota.admit(parse_review(orjson.dumps(body)), view).allowed
    assert set(entries_of(api.objects[LEDGER])) == {"uid-a", "uid-a/previous"}
    assert not admit_group(view, "b", "3").allowed  # 4 (old class) + 4 (new class) + 3 > 10


def test_a_ledger_too_large_for_its_configmap_refuses_new_groups_by_name(monkeypatch):
    """Past what one ConfigMap holds, a growing claim is refused with what to do (403, not a
    503 "retry": a retry fails the same way), and the ledger keeps what it had."""
    from priogate.ledger import codec as ledger_codec

    api, view = setup(quota_cpu="100")
    assert admit_group(view, "a", "1").allowed
    held = api.objects[LEDGER]
    size = sum(map(len, held["data"].values()))
    monkeypatch.setattr(ledger_codec, "CONFIGMAP_MAX_BYTES", size + 10)  # a second entry does not fit
    refused = admit_group(view, "b", "1")
    assert not refused.allowed and refused.code == 403
    assert "PodGroup quota: the ledger of namespace" in refused.message
    assert "delete PodGroups that are no longer needed" in refused.message
    assert {e.group for e in entries_of(api.objects[LEDGER]).values()} == {"a"}
