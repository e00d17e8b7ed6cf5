"""webhook/rules/podgroup_annotations.py: only the controller's identity creates, changes or
removes `priogate.io/` annotations on PodGroups."""

from __future__ import annotations

import pytest

from webhook.review import AdmissionRequest
from webhook.rules import podgroup_annotations as rule

CONTROLLER = rule.DEFAULT_CONTROLLER_USERNAME
RECORD = '{"id":"x","decidedAt":1,"victims":[{"namespace":"kube-system","name":"etcd","uid":"u"}]}'


def group(annotations: dict[str, str] | None) -> dict:
    meta: dict = {"name": "g", "namespace": "team"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": {}}


def request(operation: str, new: dict | None, old: dict | None, username: str) -> AdmissionRequest:
    return AdmissionRequest(
        uid="1",
        api_version="admission.k8s.io/v1",
        operation=operation,
        kind={"group": "scheduling.volcano.sh", "version": "v1beta1", "kind": "PodGroup"},
        resource={"group": "scheduling.volcano.sh", "version": "v1beta1", "resource": "podgroups"},
        sub_resource="",
        name="g",
        namespace="team",
        object=new,
        old_object=old,
        dry_run=False,
        user={"username": username, "groups": ["system:authenticated"]},
    )


REC = {"priogate.io/preemption": RECORD}
OTHER = {"team.example/owner": "alice"}


@pytest.mark.parametrize(
    ("case", "operation", "old", "new", "username", "allowed"),
    [
        ("tenant creates a group with a record", "CREATE", None, REC, "alice", False),
        ("tenant adds a record", "UPDATE", {}, REC, "alice", False),
        ("tenant changes a record", "UPDATE", REC, {"priogate.io/preemption": "{}"}, "alice", False),
        ("tenant removes a record", "UPDATE", REC, {}, "alice", False),
        ("tenant removes every annotation", "UPDATE", REC, None, "alice", False),
        ("tenant adds another priogate.io/ annotation", "UPDATE", {}, {"priogate.io/x": "1"}, "alice", False),
        ("admin (not the controller) adds a record", "UPDATE", {}, REC, "priogate-admin", False),
        ("anonymous adds a record", "UPDATE", {}, REC, "", False),
        ("tenant edits other annotations, record untouched", "UPDATE", REC, {**REC, **OTHER}, "alice", True),
        ("tenant creates a group without ours", "CREATE", None, OTHER, "alice", True),
        ("tenant updates without annotations", "UPDATE", None, None, "alice", True),
        ("controller adds a record", "UPDATE", {}, REC, CONTROLLER, True),
        ("controller marks it applied", "UPDATE", REC, {"priogate.io/preemption": "{}"}, CONTROLLER, True),
        ("a prefix look-alike is not ours", "UPDATE", {}, {"priogate.io.evil/x": "1"}, "alice", True),
    ],
)
def test_who_may_write_priogate_annotations(case, operation, old, new, username, allowed):
    old_obj = group(old) if operation == "UPDATE" else None
    decision = rule.admit(request(operation, group(new), old_obj, username), None)  # type: ignore[arg-type]
    assert decision.allowed is allowed, case
    if not allowed:
        assert decision.code == 403
        assert "written only by the priogate controller" in decision.message
        assert (username or "an anonymous user") in decision.message


def test_the_controller_identity_is_configurable(monkeypatch):
    monkeypatch.setenv(rule.USERNAME_ENV, "system:serviceaccount:ops:gatekeeper")
    req = request("UPDATE", group(REC), group({}), "system:serviceaccount:ops:gatekeeper")
    assert rule.admit(req, None).allowed  # type: ignore[arg-type]
    req = request("UPDATE", group(REC), group({}), CONTROLLER)
    assert not rule.admit(req, None).allowed  # type: ignore[arg-type]
