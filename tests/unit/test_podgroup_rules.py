"""Tables for the PodGroup rules' answers to what a tenant may send: UPDATE keeps the stored
class (webhook/rules/podgroup_defaults.py)."""

from __future__ import annotations

from typing import Any

import jsonpatch
import orjson
import pytest

from tests.builders import SYSTEM_CLASSES, group_review, make_view, podgroup, priority_class
from webhook.review import Decision, parse_review
from webhook.rules import podgroup_defaults

CLASSES = [*SYSTEM_CLASSES, priority_class("batch", 100, default=True), priority_class("high", 1000)]
TERMINATING = {"deletionTimestamp": "2026-11-23T00:00:00Z", "finalizers": []}


def group(name: str = "g", *, meta: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj = podgroup(name, **spec)
    obj["metadata"].update(meta or {})
    return obj


def decide(rule: Any, obj: dict | None, old: dict | None = None, view: Any = None, **kw: Any) -> Decision:
    operation = kw.pop("operation", "UPDATE" if old is not None else "CREATE")
    sub_resource = kw.pop("sub_resource", "")
    body = group_review(obj, operation=operation, old=old, **kw)
    if sub_resource:
        body["request"]["subResource"] = sub_resource
    return rule.admit(parse_review(orjson.dumps(body)), view or make_view(CLASSES))


def patched_spec(obj: dict, decision: Decision) -> dict:
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(obj, decision.patch)["spec"]


# ---- podgroup_defaults: CREATE resolves, UPDATE keeps ------------------------------------------


@pytest.mark.parametrize(
    ("old_class", "new_class", "want_class"),
    [
        # The class was deleted since: an annotation-only update keeps it and looks nothing up.
        ("gone", "gone", "gone"),
        # A group created before any globalDefault stays classless; no silent move into "batch".
        (None, None, None),
        ("", "", ""),
        # A client that drops the field (a replace from an older manifest) keeps the stored one.
        ("gone", None, "gone"),
        ("high", "", "high"),
        # Naming a different, existing class is a new claim: allowed here, checked by the quota rule.
        ("high", "batch", "batch"),
    ],
)
def test_update_keeps_the_stored_class(old_class, new_class, want_class):
    old_spec = {"minMember": 2, "queue": "q"} | (
        {} if old_class is None else {"priorityClassName": old_class}
    )
    new_spec = {"minMember": 2, "queue": "q"} | (
        {} if new_class is None else {"priorityClassName": new_class}
    )
    old = group(**old_spec)
    new = group(meta={"annotations": {"touched": "yes"}}, **new_spec)
    spec = patched_spec(new, decide(podgroup_defaults, new, old))
    assert spec.get("priorityClassName") == want_class


def test_update_to_a_class_that_does_not_exist_is_refused():
    old, new = group(priorityClassName="high"), group(priorityClassName="nope")
    got = decide(podgroup_defaults, new, old)
    assert not got.allowed and got.message == "no PriorityClass with name nope was found"


def test_finalizer_removal_of_a_group_whose_class_is_gone():
    spec = {"priorityClassName": "gone", "minMember": 1, "queue": "default"}
    old = group(meta={**TERMINATING, "finalizers": ["example.com/hold"]}, **spec)
    new = group(meta=TERMINATING, **spec)
    assert decide(podgroup_defaults, new, old) == Decision(True)


@pytest.mark.parametrize(
    ("class_name", "want"),
    [(None, "batch"), ("high", "high"), ("batch", "batch")],
)
def test_create_still_resolves(class_name, want):
    obj = group() if class_name is None else group(priorityClassName=class_name)
    assert patched_spec(obj, decide(podgroup_defaults, obj))["priorityClassName"] == want


def test_create_with_a_missing_class_is_refused():
    got = decide(podgroup_defaults, group(priorityClassName="gone"))
    assert not got.allowed and got.message == "no PriorityClass with name gone was found"


def test_update_defaults_still_apply():
    old = group(priorityClassName="gone", minMember=3, queue="q")
    new = group(priorityClassName="gone")
    assert patched_spec(new, decide(podgroup_defaults, new, old)) == {
        "priorityClassName": "gone",
        "minMember": 1,
        "queue": "default",
    }


def test_status_subresource_is_left_alone():
    old, new = group(priorityClassName="gone"), group(priorityClassName="gone")
    assert decide(podgroup_defaults, new, old, sub_resource="status") == Decision(True)
