"""Who may use a PriorityClass (`priogate.io/allowed-namespaces`): the table entries the
controller writes for it (priogate/priority_table.py), the PriorityClass hook's refusal of a
selector kubectl would not parse (webhook/rules/priorityclasses.py), and the in-process policy
that enforces it in both modes (webhook/class_access_policy.py). tests/e2e/test_priorityclass_policy.py
runs the policy's CEL on a real kube-apiserver."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from controller.priority_table import ClassAccessWriter
from priogate.label_selector import NEVER
from priogate.priority_table import (
    ALLOWED_NAMESPACES_ANNOTATION,
    CLASS_ACCESS_NAME,
    class_access_data,
    table_data,
)
from tests.builders import priority_class
from tests.fake_api import FakeApi
from tests.reviews import make_view, review
from webhook.class_access_policy import EXPRESSION, POLICY_NAME, VARIABLES
from webhook.configuration import policy_objects
from webhook.policy import SYSTEM_NAMESPACES, WebhookPolicy
from webhook.review import parse_review
from webhook.rules import priorityclasses


def restricted(name: str, selector: Any, **kw: Any) -> dict[str, Any]:
    pc = priority_class(name, **kw)
    pc["metadata"]["annotations"] = {ALLOWED_NAMESPACES_ANNOTATION: selector}
    return pc


@pytest.mark.parametrize(
    "selector, allowed",
    [
        ("tier=prod", "In tier prod"),
        ("team in (ml,infra),!legacy", "DoesNotExist legacy ;In team infra,ml"),
        ("", ""),  # kubectl's empty selector: every namespace
        ("tier>1", f"{NEVER} - "),  # stored past validation: usable nowhere
    ],
)
def test_a_restricted_class_has_its_selector_in_the_policys_parameter(selector, allowed):
    classes = [restricted("gold", selector, value=10), priority_class("plain", value=1)]
    assert class_access_data(classes) == {"allowed.gold": allowed, "selector.gold": selector}
    # The pod priority table is as without the annotation.
    assert table_data(classes) == table_data(
        [priority_class("gold", value=10), priority_class("plain", value=1)]
    )


CONFIGMAPS = "/api/v1/namespaces/priogate-system/configmaps"
PARAMETER = f"{CONFIGMAPS}/{CLASS_ACCESS_NAME}"


def test_the_parameter_exists_only_while_a_class_is_restricted():
    """Without it kube-apiserver skips the policy unevaluated: a cluster with no restricted class
    pays nothing for the rule."""
    classes = [priority_class("plain", value=1)]
    api = FakeApi()
    w = ClassAccessWriter(api, "priogate-system", lambda: classes)
    assert w.sync() == "unchanged"
    assert PARAMETER not in api.objects and not api.writes

    classes.append(restricted("gold", "tier=prod", value=10))
    assert w.sync() == "created"
    assert api.objects[PARAMETER]["data"] == class_access_data(classes)
    assert w.sync() == "unchanged"
    classes[-1] = restricted("gold", "tier in (prod,dev)", value=10)
    assert w.sync() == "written"
    assert api.objects[PARAMETER]["data"]["selector.gold"] == "tier in (prod,dev)"
    api.objects[PARAMETER]["data"]["allowed.gold"] = ""  # an edit by hand: everyone allowed
    assert w.sync() == "written"
    assert api.objects[PARAMETER]["data"]["allowed.gold"] == "In tier dev,prod"

    classes.pop()
    assert w.sync() == "deleted"
    assert PARAMETER not in api.objects
    assert api.writes[-1].method == "DELETE"
    assert api.writes[-1].body["preconditions"]["resourceVersion"]
    assert w.sync() == "unchanged"


def decide(obj: dict, operation: str = "CREATE", old: dict | None = None, classes=()):
    body = review(obj, operation=operation, old=old, resource="priorityclasses")
    return priorityclasses.admit(parse_review(orjson.dumps(body)), make_view(classes))


@pytest.mark.parametrize("selector", ["tier=prod", "team in (ml,infra)", "", "!legacy,tier!=dev"])
def test_a_valid_selector_is_accepted(selector):
    assert decide(restricted("gold", selector, value=10)).allowed


@pytest.mark.parametrize(
    "selector, fragment",
    [
        ("tier in (prod", "not closed"),
        ("tier>3", "not supported"),
        ("-x", "not a valid label key"),
        (7, "must be a string"),
    ],
)
def test_an_invalid_selector_is_refused_on_create_and_update(selector, fragment):
    bad = restricted("gold", selector, value=10)
    for answer in (
        decide(bad),
        decide(bad, operation="UPDATE", old=priority_class("gold", value=10), classes=[bad]),
    ):
        assert not answer.allowed
        assert answer.code == 422
        assert answer.message.startswith('PriorityClass.scheduling.k8s.io "gold" is invalid: ')
        assert f"metadata.annotations[{ALLOWED_NAMESPACES_ANNOTATION}]: Invalid value" in answer.message
        assert fragment in answer.message


def test_an_invalid_selector_is_reported_with_upstreams_field_errors():
    answer = decide(restricted("gold", "a>1", value=2_000_000_000))
    assert not answer.allowed and answer.code == 422
    assert "maximum allowed value" in answer.message and "not supported" in answer.message


@pytest.mark.parametrize("priority_plugin", [True, False], ids=["plugin-kept", "plugin-replaced"])
def test_the_policy_is_bound_in_both_modes_outside_the_system_namespaces(priority_plugin):
    objects = {
        (o["kind"], o["metadata"]["name"]): o
        for o in policy_objects(WebhookPolicy.for_mode(priority_plugin), "priogate-system")
    }
    policy = objects["ValidatingAdmissionPolicy", POLICY_NAME]["spec"]
    binding = objects["ValidatingAdmissionPolicyBinding", POLICY_NAME]["spec"]
    assert binding["paramRef"] == {
        "name": CLASS_ACCESS_NAME,
        "namespace": "priogate-system",
        "parameterNotFoundAction": "Allow",
    }
    assert binding["validationActions"] == ["Deny"]
    (expression,) = binding["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["operator"] == "NotIn" and expression["values"] == list(SYSTEM_NAMESPACES)
    rules = policy["matchConstraints"]["resourceRules"]
    assert {(r["apiGroups"][0], r["resources"][0]) for r in rules} == {
        ("", "pods"),
        ("scheduling.volcano.sh", "podgroups"),
        ("scheduling.k8s.io", "podgroups"),
    }
    operations = {r["apiGroups"][0]: r["operations"] for r in rules}
    # A Volcano PodGroup's class may change on update (the PodGroup defaults hook resolves it).
    assert operations == {
        "": ["CREATE"],
        "scheduling.volcano.sh": ["CREATE", "UPDATE"],
        "scheduling.k8s.io": ["CREATE"],
    }
    assert [c["name"] for c in policy["matchConditions"]] == ["create-or-class-change"]
    assert policy["validations"][0]["reason"] == "Forbidden"
    assert policy["validations"][0]["expression"] == EXPRESSION
    assert [v["name"] for v in policy["variables"]] == [n for n, _ in VARIABLES]


def test_only_policy_objects_for_the_resources_asked_for():
    kept = WebhookPolicy.for_mode(True)
    assert not [o for o in policy_objects(kept, "priogate-system", ["priorityclasses"])]
    kinds = {o["kind"] for o in policy_objects(kept, "priogate-system", ["pods"])}
    assert "ValidatingAdmissionPolicy" in kinds
