"""Every lease request of controller/election.py gives up well inside the renew deadline: a
read and a write can never together outlast it."""

from __future__ import annotations

from typing import Any

import pytest

from controller.election import LeaderElector
from priogate.kube.client import ApiClient, ApiError


class RecordingClient(ApiClient):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, *, timeout: Any = 30, **kw: Any) -> dict[str, Any]:
        self.calls.append((method, timeout))
        if method == "GET":
            raise ApiError(404, "NotFound", "no lease yet")
        return {"metadata": {"resourceVersion": "1"}, "spec": kw.get("body", {}).get("spec", {})}


@pytest.mark.parametrize(("renew_deadline", "lease_duration"), [(10.0, 15.0), (3.0, 4.0), (40.0, 60.0)])
def test_lease_requests_time_out_inside_the_renew_deadline(renew_deadline, lease_duration):
    client = RecordingClient()
    elector = LeaderElector(
        client,
        "ns",
        "lease",
        "me",
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=1.0,
    )
    assert elector._try_acquire_or_renew()
    assert [m for m, _ in client.calls] == ["GET", "POST"]
    for _, timeout in client.calls:
        connect, read = timeout
        assert connect + read <= renew_deadline / 2
