"""What keeps a preemption's reaction short: Events sent from their own thread (never lost on a
clean stop, a failed one only logged)."""

from __future__ import annotations

import threading
from typing import Any

from controller.events import EventRecorder
from priogate.kube.client import ApiError
from tests.unit.gang_cluster import NS


class GatedClient:
    """Answers every create only once `gate` is set (a slow kube-apiserver), recording bodies;
    fails the events about the pods named in `fail`."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.gate = threading.Event()
        self.bodies: list[dict[str, Any]] = []
        self.fail = fail

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.gate.wait(10)
        if body["regarding"]["name"] in self.fail:
            raise ApiError(500, "InternalError", "etcd is away")
        self.bodies.append(body)
        return body


def _emit(recorder: EventRecorder, name: str) -> None:
    recorder.emit(
        {"metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"}},
        "Pod",
        "v1",
        type_="Normal",
        reason="Preempted",
        action="Preempt",
        note="n",
    )


def test_an_asynchronous_recorder_returns_before_the_write_and_close_sends_what_is_queued():
    client = GatedClient()
    recorder = EventRecorder(client, "test", asynchronous=True)  # type: ignore[arg-type]
    for name in ("a", "b", "c"):
        _emit(recorder, name)  # returns although no create can finish yet
    assert client.bodies == []
    client.gate.set()
    recorder.close()
    assert [b["regarding"]["name"] for b in client.bodies] == ["a", "b", "c"]


def test_a_failed_event_write_is_logged_and_the_sender_goes_on():
    client = GatedClient(fail=("a",))
    client.gate.set()
    recorder = EventRecorder(client, "test", asynchronous=True)  # type: ignore[arg-type]
    _emit(recorder, "a")
    _emit(recorder, "b")
    recorder.close()
    assert [b["regarding"]["name"] for b in client.bodies] == ["b"]
