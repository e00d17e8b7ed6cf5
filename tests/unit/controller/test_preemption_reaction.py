"""What keeps a preemption's reaction short: Events sent from their own thread (never before a
victim's DELETE, never lost on a clean stop, a failed one only logged), and a pod event about
the last preemption's preemptor or victims waking the sweep that waits for them."""

from __future__ import annotations

import threading
from typing import Any

from controller.events import EventRecorder
from controller.pod_preemptor import Applied
from priogate.kube.client import ApiError
from priogate.preemption_record import Victim
from tests.unit.gang_cluster import EVENTS_PATH, NS, pod_path
from tests.unit.pod_cluster import cluster, pending, running


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


def test_the_victims_event_follows_its_delete():
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    assert c.preemptor().sweep().result == "preempted"
    order = [(w.method, w.path) for w in c.client.writes if w.path in (pod_path("v"), EVENTS_PATH)]
    assert order[:2] == [("DELETE", pod_path("v")), ("POST", EVENTS_PATH)]


def test_an_event_about_the_last_preemptor_or_its_victims_wakes_the_waiting_sweep():
    c = cluster(running("v", 1, cpu="4"), running("other", 1, cpu="1"), pending("hi", 10))
    preemptor = c.preemptor()
    assert not preemptor.awaits(c.client.objects[pod_path("v")])  # nothing applied yet
    preemptor.last = Applied(NS, "hi", "uid-hi", "n1", (Victim(NS, "v", "uid-v", "n1"),), 0.0)
    assert preemptor.awaits({"metadata": {"namespace": NS, "name": "hi"}})
    assert preemptor.awaits({"metadata": {"namespace": NS, "name": "v"}})
    assert not preemptor.awaits({"metadata": {"namespace": NS, "name": "other"}})
    assert not preemptor.awaits({"metadata": {"namespace": "elsewhere", "name": "v"}})
