"""certs/uninstall.py: what `python -m certs uninstall` deletes, and that it waits for the pods."""

from __future__ import annotations

from certs.uninstall import uninstall
from priogate.kube.client import ApiError


class FakeClient:
    def __init__(self, pods: list[list[str]], existing: set[str]) -> None:
        self.pods = pods  # what each successive pod LIST answers
        self.existing = existing
        self.deleted: list[str] = []

    def get(self, path: str, **kw: object) -> dict:
        if path.endswith("/pods"):
            names = self.pods.pop(0) if len(self.pods) > 1 else self.pods[0]
            return {"items": [{"metadata": {"name": n}} for n in names]}
        assert path.endswith("/configmaps")
        assert kw["query"] == [("labelSelector", "priogate.io/ledger=podgroup-ledger")]
        return {"items": [{"metadata": {"name": n}} for n in ("podgroup-ledger.a", "podgroup-ledger.b")]}

    def delete(self, path: str) -> dict:
        if path not in self.existing:
            raise ApiError(404, "NotFound", "")
        self.deleted.append(path)
        return {}


def test_waits_for_the_pods_then_deletes_what_priogate_made() -> None:
    ns = "/api/v1/namespaces/gate"
    existing = {
        f"{ns}/secrets/priogate-webhook-tls",
        f"{ns}/configmaps/podgroup-ledger.a",
        f"{ns}/configmaps/podgroup-ledger.b",
        "/apis/coordination.k8s.io/v1/namespaces/gate/leases/priogate-controller",
    }
    client = FakeClient([["webhook-1", "controller-1"], ["controller-1"], []], existing)
    sleeps: list[float] = []
    deleted = uninstall(client, "gate", say=lambda _: None, sleep=sleeps.append)
    assert len(sleeps) == 2, "it waited until no webhook or controller pod was left"
    # The table was already gone (helm deleted it): a 404 is success.
    assert set(deleted) == existing


def test_gives_up_waiting_after_the_deadline() -> None:
    client = FakeClient([["stuck"]], set())
    said: list[str] = []
    assert uninstall(client, "gate", wait_seconds=0.0, say=said.append, sleep=lambda _: None) == []
    assert said and "stuck" in said[0]
