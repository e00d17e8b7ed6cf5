"""What the webhook does while a cache is stale (listed once, its watch down since): the quota
hooks refuse with a 503 that names the cache and says to retry, /readyz fails, the priority hooks
answer from the last PriorityClasses, a PodGroup DELETE releases nothing, and a reservation is
pruned only when a quorum LIST (not the cache) shows its group gone."""

from __future__ import annotations

from typing import Any

import pytest

from priogate.kube.client import ApiError
from priogate.ledger.memory import MemoryLedgerStore
from priogate.ledger.model import Entry, Ledger
from tests.builders import SYSTEM_CLASSES, pod, podgroup, priority_class, resource_quota
from tests.reviews import group_review, make_view, review
from webhook.app import create_app

CLASSES = [*SYSTEM_CLASSES, priority_class("batch", value=100, default=True)]
OLD = "2026-01-01T00:00:00Z"  # long past the reclaim grace


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webhook.endpoints.CACHE_SYNC_GRACE_SECONDS", 0.05)


def answer(client: Any, path: str, body: dict) -> dict:
    resp = client.post(path, json=body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()["response"]


def test_stale_podgroups_cache_refuses_quota_decisions_and_fails_readiness() -> None:
    view = make_view(CLASSES, quotas=[resource_quota("compute", hard={"cpu": "4"})])
    client = create_app(view).test_client()
    assert client.get("/readyz").status_code == 200
    view.caches["podgroups"].mark_stale("list failed: 404 NotFound")

    got = answer(client, "/validate/podgroups", group_review(podgroup("g", min_resources={"cpu": "1"})))
    assert got["allowed"] is False
    assert got["status"]["code"] == 503
    message = got["status"]["message"]
    assert "podgroups" in message and "stale" in message and "retry" in message
    assert "404" in message

    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "podgroups stale" in ready.get_data(as_text=True)


def test_stale_pods_cache_refuses_pod_quota() -> None:
    view = make_view(CLASSES, quotas=[resource_quota("compute", hard={"cpu": "4"})])
    client = create_app(view).test_client()
    view.caches["pods"].mark_stale("watch failed: no event or bookmark for 120 s")
    got = answer(client, "/validate/pods", review(pod("p")))
    assert got["allowed"] is False and got["status"]["code"] == 503
    assert "pods" in got["status"]["message"] and "retry" in got["status"]["message"]


def test_a_podgroup_delete_releases_nothing_even_while_stale() -> None:
    """DELETE is not registered; one posted anyway changes nothing (a reservation ends when a
    quorum LIST shows the group gone), whatever the caches' state."""
    store = MemoryLedgerStore()
    store.ledgers["default"] = Ledger({"uid-g": Entry("g", "uid-g", {"cpu": "4"}, 1, "", OLD)})
    view = make_view(CLASSES, quotas=[resource_quota("compute", hard={"cpu": "4"})], ledger_store=store)
    client = create_app(view).test_client()
    view.caches["podgroups"].mark_stale("watch failed: connection refused")
    got = answer(client, "/validate/podgroups", group_review(None, operation="DELETE", old=podgroup("g")))
    assert got["allowed"] is True
    assert list(store.ledgers["default"].entries) == ["uid-g"]


def test_stale_priorityclasses_are_still_answered_and_ready() -> None:
    """PriorityClasses change rarely; refusing every pod in the cluster would be worse."""
    view = make_view(CLASSES)
    client = create_app(view).test_client()
    view.caches["priorityclasses"].mark_stale("watch failed: connection refused")
    got = answer(client, "/mutate/pods", review(pod("p")))
    assert got["allowed"] is True and "patch" in got
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert "stale" in ready.get_data(as_text=True)


def test_never_listed_is_still_starting() -> None:
    view = make_view(CLASSES, synced=False)
    client = create_app(view).test_client()
    got = answer(client, "/validate/podgroups", group_review(podgroup("g")))
    assert got["status"]["code"] == 503 and "starting" in got["status"]["message"]
    assert client.get("/readyz").status_code == 503


class Lister:
    """The quorum LIST: PodGroups of namespace "default" as etcd has them, or an error."""

    def __init__(self, groups: list[dict] | None = None, error: Exception | None = None) -> None:
        self.groups = groups or []
        self.error = error
        self.calls = 0

    def list_all(self, path: str, **_: Any) -> list[dict]:
        self.calls += 1
        assert path == "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups"
        if self.error is not None:
            raise self.error
        return self.groups


def quota_client(lister: Lister) -> tuple[Any, MemoryLedgerStore]:
    """cpu=4; "old" reserved cpu=4 long ago, and the (current) cache has no PodGroup "old"."""
    store = MemoryLedgerStore()
    store.ledgers["default"] = Ledger({"uid-old": Entry("old", "uid-old", {"cpu": "4"}, 1, "", OLD)})
    view = make_view(CLASSES, quotas=[resource_quota("compute", hard={"cpu": "4"})], ledger_store=store)
    view.client = lister  # type: ignore[assignment]
    return create_app(view).test_client(), store


def new_group() -> dict:
    return group_review(podgroup("new", min_resources={"cpu": "4"}))


def test_reservation_the_quorum_list_still_shows_is_not_pruned() -> None:
    # The cache missed it; etcd has it (as admitted: the ledger follows the stored spec).
    lister = Lister([podgroup("old", min_resources={"cpu": "4"})])
    client, store = quota_client(lister)
    got = answer(client, "/validate/podgroups", new_group())
    assert got["allowed"] is False and "quota" in got["status"]["message"]
    assert list(store.ledgers["default"].entries) == ["uid-old"]
    assert lister.calls == 1


def test_reservation_is_kept_when_the_quorum_list_fails() -> None:
    client, store = quota_client(Lister(error=ApiError(503, "ServiceUnavailable", "etcd")))
    got = answer(client, "/validate/podgroups", new_group())
    assert got["allowed"] is False
    assert list(store.ledgers["default"].entries) == ["uid-old"]


def test_reservation_the_quorum_list_shows_gone_is_pruned() -> None:
    client, store = quota_client(Lister([]))
    assert answer(client, "/validate/podgroups", new_group())["allowed"] is True
    assert [e.group for e in store.ledgers["default"].entries.values()] == ["new"]
