"""Tables for the native PodGroup priority rule (webhook/rules/native_podgroup_priority.py) and
its message (priogate.priority.podgroup_priority_conflict): upstream's admitPodGroup, plus what
a malformed or unusual request gets. The acceptance cases are in
tests/integration/test_acceptance_native_podgroups.py."""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
import pytest

from priogate import priority as p
from tests.builders import SYSTEM_CLASSES, priority_class
from tests.reviews import make_app, make_view, review
from webhook.objects import MalformedObject
from webhook.review import Decision, parse_review
from webhook.rules import native_podgroup_priority as rule

CLASSES = [
    *SYSTEM_CLASSES,
    priority_class("batch", value=100, default=True),
    priority_class("high", value=1000),
]
NO_DEFAULT = [c for c in CLASSES if not c["globalDefault"]]
MISSING = "no PriorityClass with name gone was found"


def native_group(name: str | None = "g", *, generate_name: str | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "team-a"}
    if name is not None:
        meta["name"] = name
    if generate_name is not None:
        meta["generateName"] = generate_name
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"schedulingPolicy": {"basic": {}}, **spec},
    }


def decide(
    obj: Any,
    *,
    classes: list[dict] = CLASSES,
    operation: str = "CREATE",
    old: Any = None,
    sub_resource: str = "",
    name: str | None = None,
) -> Decision:
    body = review(obj, operation=operation, old=old, sub_resource=sub_resource)
    gvk = {"group": "scheduling.k8s.io", "version": "v1alpha2"}
    body["request"]["kind"] = {**gvk, "kind": "PodGroup"}
    body["request"]["resource"] = {**gvk, "resource": "podgroups"}
    if name is not None:
        body["request"]["name"] = name
    return rule.admit(parse_review(orjson.dumps(body)), make_view(classes))


def spec_after(obj: dict, decision: Decision) -> dict:
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, decision.patch)["spec"]


@pytest.mark.parametrize(
    ("spec", "classes", "want_priority", "want_class"),
    [
        ({"priorityClassName": "high"}, CLASSES, 1000, "high"),
        ({}, CLASSES, 100, "batch"),  # the globalDefault's value and name
        ({"priorityClassName": ""}, CLASSES, 100, "batch"),  # empty is no class
        ({}, NO_DEFAULT, 0, None),  # no default: 0, the name stays out
        ({"priority": 1000, "priorityClassName": "high"}, CLASSES, 1000, "high"),  # equal preset
        ({"priority": 100}, CLASSES, 100, "batch"),
        ({"priority": 0}, NO_DEFAULT, 0, None),
        # system- classes resolve like any other; the API server's validation then refuses the value.
        ({"priorityClassName": "system-node-critical"}, CLASSES, 2000001000, "system-node-critical"),
    ],
)
def test_create_resolves(spec, classes, want_priority, want_class):
    obj = native_group(**spec)
    got = spec_after(obj, decide(obj, classes=classes))
    assert got.get("priority") == want_priority
    assert got.get("priorityClassName") == want_class
    assert "preemptionPolicy" not in got  # PodGroups have none; the class's policy is dropped


def test_an_equal_preset_needs_no_patch():  # reinvocation and a cluster with both agree
    assert decide(native_group(priority=1000, priorityClassName="high")).patch == []


@pytest.mark.parametrize(
    ("obj", "name", "message"),
    [
        (
            native_group(priorityClassName="gone"),
            None,
            f'podgroups.scheduling.k8s.io "g" is forbidden: {MISSING}',
        ),
        (
            native_group(priority=5, priorityClassName="high"),
            None,
            'podgroups.scheduling.k8s.io "g" is forbidden: priority set in the pod group (5) must match '
            "the priority computed (1000) based on the priority class set in the spec",
        ),
        (
            native_group(priority=0),
            None,
            "priority set in the pod group (0) must match the priority computed (100)",
        ),
        # The name in the message as upstream's extractResourceName picks it.
        (native_group(None, generate_name="gen-", priorityClassName="gone"), "", '"gen-" is forbidden'),
        (native_group(None, priorityClassName="gone"), "", '"Unknown" is forbidden'),
        (native_group("obj", priorityClassName="gone"), "req", '"req" is forbidden'),
    ],
)
def test_create_refusals(obj, name, message):
    decision = decide(obj, name=name)
    assert not decision.allowed
    assert decision.code == 403 and decision.reason == "Forbidden"
    assert message in decision.message


def test_a_missing_class_is_refused_before_a_preset_mismatch():  # establishPriority runs first
    assert MISSING in decide(native_group(priority=5, priorityClassName="gone")).message


def test_a_group_without_spec_gets_one():
    obj = native_group()
    del obj["spec"]
    assert spec_after(obj, decide(obj)) == {"priority": 100, "priorityClassName": "batch"}


@pytest.mark.parametrize(
    "kw",
    [
        {"operation": "UPDATE", "old": native_group(priority=1000, priorityClassName="high")},
        {"operation": "DELETE", "old": native_group(priority=1000, priorityClassName="high")},
        {"sub_resource": "status"},
    ],
    ids=["update", "delete", "status"],
)
def test_only_create_of_the_main_resource_is_resolved(kw):
    # UPDATE: no carry-over and no lookup, even of a class that is gone or a dropped priority;
    # the API server's immutability validation answers (admitPodGroup runs on Create only).
    obj = None if kw.get("operation") == "DELETE" else native_group(priorityClassName="gone")
    decision = decide(obj, **kw)
    assert decision.allowed and decision.patch == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"priority": "5"}, "object.spec.priority must be an integer"),
        ({"priority": True}, "object.spec.priority must be an integer"),
        ({"priorityClassName": 7}, "object.spec.priorityClassName must be a string"),
    ],
)
def test_malformed_fields_are_named(spec, field):
    with pytest.raises(MalformedObject, match=field):
        decide(native_group(**spec))


def test_a_malformed_spec_is_a_400_not_a_500():
    body = review(native_group())
    body["request"]["object"]["spec"] = ["not", "a", "map"]
    resp = make_app(CLASSES).test_client().post(rule.RULE_SET.path, json=body)
    status = resp.get_json()["response"]["status"]
    assert (status["code"], "object.spec must be an object" in status["message"]) == (400, True)


@pytest.mark.parametrize(
    ("given", "want"),
    [
        (None, None),
        (1000, None),
        (
            1,
            "priority set in the pod group (1) must match the priority computed (1000) based on the "
            "priority class set in the spec",
        ),
        (-1000, "priority set in the pod group (-1000)"),
    ],
)
def test_podgroup_priority_conflict(given, want):
    got = p.podgroup_priority_conflict(given, p.Resolution(1000, "Never", "c", False))
    assert got == want or (want is not None and got is not None and got.startswith(want))
