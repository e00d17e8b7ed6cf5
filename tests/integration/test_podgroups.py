"""PodGroup defaults, PodGroupMinResources and pod quota over HTTP, with the in-process ledger.
(The API-server ledger under real concurrency is tested end to end in tests/e2e.)"""

from __future__ import annotations

import datetime as dt
import threading

import jsonpatch
import pytest

from priogate.ledger.memory import MemoryLedgerStore
from priogate.ledger.model import Entry, Ledger
from tests.builders import SYSTEM_CLASSES, ledger, pod, podgroup, priority_class, resource_quota
from tests.reviews import decode_patch, group_review, make_app, review

CLASSES = [
    *SYSTEM_CLASSES,
    priority_class("batch", value=100, default=True),
    priority_class("high", value=1000),
]


def client_with(quotas=(), store=None, **kw):
    store = store or MemoryLedgerStore()
    return make_app(CLASSES, quotas=quotas, ledger_store=store, **kw).test_client(), store


def stored(client, group) -> None:
    """kube-apiserver stores an admitted group a moment after the last webhook answered: the
    cache stands in for the quorum LIST here."""
    client.application.wsgi_app.view.caches["podgroups"].apply_event("ADDED", group)


def answer(client, path, body):
    resp = client.post(path, json=body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["response"]


def test_defaults_and_class_resolution():
    client, _ = client_with()
    group = podgroup("g", namespace="team-a")
    patched = jsonpatch.apply_patch(
        group, decode_patch(answer(client, "/mutate/podgroups", group_review(group)))
    )
    assert patched["spec"] == {"minMember": 1, "queue": "default", "priorityClassName": "batch"}
    kept = podgroup("g", namespace="team-a", min_member=4, queue="q1", priority_class="high")
    assert "patch" not in answer(client, "/mutate/podgroups", group_review(kept))


def test_unknown_class_is_refused():
    client, _ = client_with()
    got = answer(
        client, "/mutate/podgroups", group_review(podgroup("g", namespace="team-a", priority_class="nope"))
    )
    assert got["allowed"] is False
    assert got["status"]["message"] == "no PriorityClass with name nope was found"


def test_exactly_the_quota_is_admitted_and_only_a_gone_group_releases():
    client, store = client_with([resource_quota("compute", hard={"cpu": "10"}, namespace="team-a")])
    results = []
    for i in range(12):
        group = podgroup(f"g{i}", namespace="team-a", min_resources={"cpu": "1"})
        results.append(answer(client, "/validate/podgroups", group_review(group)))
        if results[-1]["allowed"]:
            stored(client, group)
    assert [r["allowed"] for r in results] == [True] * 10 + [False] * 2
    message = results[10]["status"]["message"]
    assert message.startswith("exceeded quota: compute, requested: cpu=1, reserved: cpu=10, limited: cpu=10")
    assert len(store.ledgers["team-a"].entries) == 10
    # A DELETE admission (forged: DELETE is not registered) releases nothing.
    deleted = group_review(
        None, operation="DELETE", old=podgroup("g3", namespace="team-a", min_resources={"cpu": "1"})
    )
    deleted["request"]["name"] = "g3"
    assert answer(client, "/validate/podgroups", deleted)["allowed"] is True
    assert len(store.ledgers["team-a"].entries) == 10
    g10 = group_review(podgroup("g10", namespace="team-a", min_resources={"cpu": "1"}))
    assert answer(client, "/validate/podgroups", g10)["allowed"] is False  # all ten still stored


def test_an_entry_ends_when_its_group_is_confirmed_gone():
    """Nine of ten admitted groups are stored (the cache stands in for the quorum LIST here); g3
    never is (a later admission step refused it). An admission it blocks waits for its fate: it
    is refused with 'retry' while its deadline is too short to see the bound pass, and goes
    through once the bound has passed, taking g3's place."""
    stored_groups = [
        podgroup(f"g{i}", namespace="team-a", min_resources={"cpu": "1"}) for i in range(10) if i != 3
    ]
    client, store = client_with(
        [resource_quota("compute", hard={"cpu": "10"}, namespace="team-a")], podgroups=stored_groups
    )
    view = client.application.wsgi_app.view
    view.in_flight = dt.timedelta(seconds=60)
    for i in range(10):
        body = group_review(podgroup(f"g{i}", namespace="team-a", min_resources={"cpu": "1"}))
        assert answer(client, "/validate/podgroups", body)["allowed"]
    g10 = group_review(podgroup("g10", namespace="team-a", min_resources={"cpu": "1"}))
    # kube-apiserver's ?timeout: too short to wait for g3's bound to pass.
    hurried = answer(client, "/validate/podgroups?timeout=3s", g10)
    assert hurried["allowed"] is False and "retry" in hurried["status"]["message"]
    view.in_flight = dt.timedelta(seconds=1)  # a bound the next request can wait out
    assert answer(client, "/validate/podgroups?timeout=10s", g10)["allowed"] is True
    assert sorted(e.group for e in store.ledgers["team-a"].entries.values()) == sorted(
        f"g{i}" for i in range(11) if i != 3
    )


def test_concurrent_admissions_never_over_admit():
    client, store = client_with([resource_quota("compute", hard={"cpu": "10"}, namespace="team-a")])
    app = client.application
    allowed = []

    def create(i):
        group = podgroup(f"g{i}", namespace="team-a", min_resources={"cpu": "1"})
        with app.test_client() as c:
            got = answer(c, "/validate/podgroups", group_review(group))
            if got["allowed"]:
                stored(c, group)
            allowed.append(got)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(a["allowed"] for a in allowed) == 10
    assert len(store.ledgers["team-a"].entries) == 10


def test_update_growing_is_checked_shrinking_is_not():
    client, _ = client_with([resource_quota("compute", hard={"cpu": "4"}, namespace="team-a")])
    a, b = (
        podgroup("a", namespace="team-a", min_resources={"cpu": "2"}),
        podgroup("b", namespace="team-a", min_resources={"cpu": "2"}),
    )
    for group in (a, b):
        assert answer(client, "/validate/podgroups", group_review(group))["allowed"]
        stored(client, group)
    grown = podgroup("a", namespace="team-a", min_resources={"cpu": "3"})
    refused = answer(client, "/validate/podgroups", group_review(grown, operation="UPDATE", old=a))
    assert (
        refused["allowed"] is False
        and "requested: cpu=3, reserved: cpu=2, limited: cpu=4" in refused["status"]["message"]
    )
    shrunk = podgroup("a", namespace="team-a", min_resources={"cpu": "1"})
    assert answer(client, "/validate/podgroups", group_review(shrunk, operation="UPDATE", old=a))["allowed"]


def test_dry_run_writes_nothing():
    client, store = client_with([resource_quota("compute", hard={"cpu": "1"}, namespace="team-a")])
    body = group_review(podgroup("g", namespace="team-a", min_resources={"cpu": "1"}), dry_run=True)
    assert answer(client, "/validate/podgroups", body)["allowed"]
    assert store.writes == 0
    too_big = group_review(podgroup("g", namespace="team-a", min_resources={"cpu": "2"}), dry_run=True)
    assert answer(client, "/validate/podgroups", too_big)["allowed"] is False


def test_bad_min_resources_is_a_400_denial():
    client, _ = client_with([resource_quota("compute", hard={"cpu": "1"}, namespace="team-a")])
    got = answer(
        client,
        "/validate/podgroups",
        group_review(podgroup("g", namespace="team-a", min_resources={"cpu": "lots"})),
    )
    assert got["allowed"] is False and got["status"]["code"] == 400
    assert "spec.minResources" in got["status"]["message"] and "cpu" in got["status"]["message"]


@pytest.fixture
def reserved_namespace():
    """cpu=10 quota with 2 used; group "gang" reserved cpu=6 and one member using 1 of it."""
    quota = resource_quota("compute", hard={"cpu": "10"}, used={"cpu": "2"}, namespace="team-a")
    reservations = ledger(namespace="team-a", gang={"cpu": "6"})
    member = pod("m0", namespace="team-a", cpu="1", group="gang")
    # uid-gang, matching the ledger
    live = podgroup("gang", namespace="team-a", min_member=1, min_resources={"cpu": "6"})
    return dict(quotas=[quota], ledgers=[reservations], pods=[member], podgroups=[live])


def test_plain_pod_cannot_eat_reservations(reserved_namespace):
    client, _ = client_with(**reserved_namespace)
    # used 2 + unconsumed 5 (6 reserved, 1 used by the member) leaves 3 for others.
    assert answer(client, "/validate/pods", review(pod("ok", namespace="team-a", cpu="3")))["allowed"]
    refused = answer(client, "/validate/pods", review(pod("greedy", namespace="team-a", cpu="3500m")))
    assert refused["allowed"] is False
    assert "reserved by PodGroups: cpu=5" in refused["status"]["message"]
    # A member of the group draws on its own reservation.
    assert answer(client, "/validate/pods", review(pod("m1", namespace="team-a", cpu="5", group="gang")))[
        "allowed"
    ]


def test_a_ledger_without_entries_still_reserves_for_stored_groups(reserved_namespace):
    """The ledger lost its entry; the stored group still reserves (adopted from the cache)."""
    reserved_namespace["ledgers"] = [ledger(namespace="team-a")]
    client, _ = client_with(**reserved_namespace)
    refused = answer(client, "/validate/pods", review(pod("greedy", namespace="team-a", cpu="3500m")))
    assert refused["allowed"] is False and "reserved by PodGroups: cpu=5" in refused["status"]["message"]


def test_no_reservation_no_refusal(reserved_namespace):
    reserved_namespace["ledgers"] = [ledger(namespace="team-a")]
    reserved_namespace["podgroups"] = []
    client, _ = client_with(**reserved_namespace)
    assert answer(client, "/validate/pods", review(pod("greedy", namespace="team-a", cpu="3500m")))["allowed"]


def test_reservation_of_a_group_that_never_got_stored_stops_counting(reserved_namespace):
    """The entry is a day old and no PodGroup with its uid is stored: confirmed, it reserves
    nothing."""
    reserved_namespace["ledgers"] = [ledger(namespace="team-a", ghost={"cpu": "6"})]
    reserved_namespace["podgroups"] = []
    client, _ = client_with(**reserved_namespace)
    assert answer(client, "/validate/pods", review(pod("greedy", namespace="team-a", cpu="7")))["allowed"]


def test_pods_in_a_burst_are_charged_until_status_used_shows_them(reserved_namespace):
    """used 2, 5 reserved and unconsumed, hard 10: 3 cpu are free; the quota's status.used does
    not move between admissions (kube-apiserver charges it after the webhooks), the ledger's
    charges do."""
    client, store = client_with(**reserved_namespace)
    # kube-apiserver's ?timeout, shorter than the charges' in-flight bound: a pod that fits only
    # if the charged pods are never stored cannot wait for that here and is refused ('retry').
    answers = [
        answer(client, "/validate/pods?timeout=3s", review(pod(f"p{i}", namespace="team-a", cpu="1")))
        for i in range(5)
    ]
    assert [a["allowed"] for a in answers] == [True, True, True, False, False]
    assert "retry" in answers[3]["status"]["message"]
    assert len(store.ledgers["team-a"].charges) == 3


def test_resize_into_a_reservation_is_refused(reserved_namespace):
    client, _ = client_with(**reserved_namespace)
    small, big = pod("p", namespace="team-a", cpu="1"), pod("p", namespace="team-a", cpu="5")
    for p in (small, big):
        p["metadata"]["uid"] = "uid-p"
    body = review(big, operation="UPDATE", old=small, sub_resource="resize")
    refused = answer(client, "/validate/pods", body)
    assert refused["allowed"] is False and "requested: cpu=4" in refused["status"]["message"]
    fits = pod("p", namespace="team-a", cpu="4")  # used 2 + 3 more + 5 unconsumed = 10
    fits["metadata"]["uid"] = "uid-p"
    assert answer(
        client, "/validate/pods", review(fits, operation="UPDATE", old=small, sub_resource="resize")
    )["allowed"]


def test_stale_entries_are_pruned_by_the_admission_they_would_block():
    store = MemoryLedgerStore()
    store.ledgers["team-a"] = Ledger(
        {"uid-ghost": Entry("ghost", "uid-ghost", {"cpu": "4"}, 1, "", "2026-01-01T00:00:00Z")}
    )
    client, _ = client_with([resource_quota("compute", hard={"cpu": "4"}, namespace="team-a")], store=store)
    assert answer(
        client,
        "/validate/podgroups",
        group_review(podgroup("real", namespace="team-a", min_resources={"cpu": "4"})),
    )["allowed"]
    assert [e.group for e in store.ledgers["team-a"].entries.values()] == ["real"]
