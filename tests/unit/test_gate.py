"""Delay Pod Creation's scheduling gate: who gets it at admission (priogate.gate,
webhook/rules/pod_gate.py), who may lift it (webhook/rules/pod_gate_guard.py), and the
controller's lifting (controller/gates.py)."""

from __future__ import annotations

import time
from typing import Any

import jsonpatch
import pytest

from controller.gates import GateLifter
from priogate import gate
from priogate.clock import from_epoch, rfc3339
from priogate.kube.client import ApiError
from webhook.review import AdmissionRequest
from webhook.rules import pod_gate, pod_gate_guard
from webhook.rules.podgroup_annotations import DEFAULT_CONTROLLER_USERNAME

GROUP_ANNOTATION = {"scheduling.k8s.io/group-name": "gang"}


def member(
    *, gates: list[dict] | None = None, node: str | None = None, created: str | None = None, **meta: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    if node:
        spec["nodeName"] = node
    metadata: dict[str, Any] = {"name": "m0", "namespace": "team", **meta}
    if created:
        metadata["creationTimestamp"] = created
    metadata.setdefault("annotations", dict(GROUP_ANNOTATION))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.mark.parametrize(
    ("pod", "phase", "gated"),
    [
        (member(), None, True),  # its group does not exist (yet)
        (member(), "", True),  # created, not decided yet
        (member(), "Pending", True),
        (member(), "Inqueue", False),
        (member(), "Running", False),
        (member(), "Unknown", False),
        (member(), "Completed", False),
        (member(annotations={}), None, False),  # not a member
        (member(annotations={}, labels={"scheduling.x-k8s.io/pod-group": "gang"}), "Pending", True),
        (member(node="n1"), "Pending", False),  # bypasses the scheduler; gates are refused there
        (member(gates=[{"name": gate.GATE}]), "Pending", False),  # already gated
    ],
)
def test_a_member_is_gated_until_its_group_is_admitted(pod, phase, gated):
    assert gate.needs_gate(pod, phase) is gated


@pytest.mark.parametrize("others", [None, [], [{"name": "example.com/other"}]])
def test_the_gate_patch_adds_only_priogates_gate(others):
    pod = member(gates=others)
    patched = jsonpatch.apply_patch(pod, gate.gate_patch(pod))
    assert patched["spec"]["schedulingGates"] == [*(others or []), {"name": gate.GATE}]
    assert gate.has_gate(patched)


def test_lifting_deletes_the_gate_by_name_only():
    assert gate.lift_patch() == {"spec": {"schedulingGates": [{"$patch": "delete", "name": gate.GATE}]}}


@pytest.mark.parametrize(
    ("old", "new", "dropped"),
    [
        ([{"name": gate.GATE}], [], True),
        ([{"name": gate.GATE}], None, True),
        ([{"name": gate.GATE}, {"name": "x"}], [{"name": "x"}], True),
        ([{"name": gate.GATE}, {"name": "x"}], [{"name": gate.GATE}], False),
        ([{"name": "x"}], [], False),
        (None, None, False),
    ],
)
def test_dropped(old, new, dropped):
    assert gate.dropped(member(gates=old), member(gates=new)) is dropped


def test_orphans_are_due_after_the_bound():
    due, next_due = gate.orphans_due([("a", 100.0), ("b", 250.0), ("c", 280.0)], now=400.0, bound=300.0)
    assert due == ["a"]
    assert next_due == pytest.approx(150.0)
    assert gate.orphans_due([("a", 100.0)], now=400.0, bound=300.0) == (["a"], None)


# ---- the admission rules --------------------------------------------------------------------


class GroupView:
    def __init__(self, groups: dict[str, dict]) -> None:
        self.groups = groups

    def podgroup(self, namespace: str, name: str) -> dict | None:
        return self.groups.get(f"{namespace}/{name}")


def review(operation: str, new: dict, old: dict | None = None, username: str = "alice") -> AdmissionRequest:
    return AdmissionRequest(
        uid="1",
        api_version="admission.k8s.io/v1",
        operation=operation,
        kind={"group": "", "version": "v1", "kind": "Pod"},
        resource={"group": "", "version": "v1", "resource": "pods"},
        sub_resource="",
        name="m0",
        namespace="team",
        object=new,
        old_object=old,
        dry_run=False,
        user={"username": username, "groups": ["system:authenticated"]},
    )


@pytest.mark.parametrize(
    ("groups", "patched"),
    [
        ({}, True),
        ({"team/gang": {"status": {"phase": "Pending"}}}, True),
        ({"team/gang": {}}, True),
        ({"team/gang": {"status": {"phase": "Inqueue"}}}, False),
        ({"other/gang": {"status": {"phase": "Inqueue"}}}, True),  # another namespace's group
    ],
)
def test_the_gate_hook_patches_a_member_of_a_waiting_group(groups, patched):
    decision = pod_gate.admit(review("CREATE", member()), GroupView(groups))  # type: ignore[arg-type]
    assert decision.allowed
    assert bool(decision.patch) is patched


@pytest.mark.parametrize(
    ("username", "old", "new", "allowed"),
    [
        ("alice", [{"name": gate.GATE}], [], False),
        (DEFAULT_CONTROLLER_USERNAME, [{"name": gate.GATE}], [], True),
        ("alice", [{"name": gate.GATE}], [{"name": gate.GATE}], True),  # another change
        ("alice", [{"name": "x"}], [], True),  # someone else's gate
    ],
)
def test_only_the_controller_lifts_the_gate(username, old, new, allowed):
    decision = pod_gate_guard.admit(
        review("UPDATE", member(gates=new), member(gates=old), username),
        None,  # type: ignore[arg-type]
    )
    assert decision.allowed is allowed
    if not allowed:
        assert f"{gate.GATE} is lifted only by the priogate controller" in decision.message
        assert "not by alice" in decision.message


# ---- the controller -------------------------------------------------------------------------


class Patches:
    def __init__(self, missing: frozenset[str] = frozenset()) -> None:
        self.missing = missing
        self.paths: list[str] = []

    def request(self, method: str, path: str, **kw: Any) -> dict:
        assert method == "PATCH" and kw["content_type"] == "application/strategic-merge-patch+json"
        assert kw["body"] == gate.lift_patch()
        if path.rsplit("/", 1)[1] in self.missing:
            raise ApiError(404, "NotFound", "gone")
        self.paths.append(path)
        return {}


class Events:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []

    def emit(self, regarding: dict, kind: str, api_version: str, **kw: Any) -> None:
        self.notes.append((regarding["metadata"]["name"], kw["note"]))


def named(name: str, **kw: Any) -> dict:
    pod = member(**kw)
    pod["metadata"]["name"] = name
    return pod


def test_the_controller_lifts_only_gated_members_and_a_gone_one_is_no_error():
    client = Patches(missing=frozenset({"gone"}))
    lifter = GateLifter(client, None)  # type: ignore[arg-type]
    members = [
        named("a", gates=[{"name": gate.GATE}]),
        named("b"),
        named("gone", gates=[{"name": gate.GATE}]),
    ]
    assert lifter.lift(members) == 1
    assert client.paths == ["/api/v1/namespaces/team/pods/a"]


def test_members_of_a_group_that_never_appears_are_released_with_an_event():
    client, events = Patches(), Events()
    lifter = GateLifter(client, events, orphan_seconds=60)  # type: ignore[arg-type]
    old = rfc3339_ago(120)
    young = rfc3339_ago(10)
    members = [
        named("old", gates=[{"name": gate.GATE}], created=old),
        named("young", gates=[{"name": gate.GATE}], created=young),
    ]
    next_due = lifter.orphans("team", "typo", members)
    assert client.paths == ["/api/v1/namespaces/team/pods/old"]
    assert next_due is not None and 40 < next_due <= 51
    (note,) = events.notes
    assert note[0] == "old" and "PodGroup team/typo does not exist after 60s" in note[1]


def rfc3339_ago(seconds: float) -> str:
    return rfc3339(from_epoch(time.time() - seconds))
