"""Every case of tests/data/podgroup-priority-cases.yaml, sent to the webhook over HTTP (Flask test
client) in the AdmissionReview shape kube-apiserver would send.

Cases the API server's own validation refuses after admission (layer podgroup-validation) are
checked for what the webhook must do so that validation is the one to refuse: allow, and (on
CREATE) write the resolved value as upstream's plugin does; on UPDATE change nothing."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from tests.acceptance_cases import PATHS, PODGROUP_DATA, load_cases, message_matches, review
from tests.reviews import decode_patch, make_app

CASES = load_cases(PODGROUP_DATA)
OWNED = [c for c in CASES if c.skip_reason is None]
VALIDATION = [c for c in CASES if c.skip_reason is not None]


def answer(case):
    client = make_app(case.stored_classes()).test_client()
    body = review(case)
    resp = client.post(PATHS[case.resource], json=body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    response = resp.get_json()["response"]
    assert response["uid"] == body["request"]["uid"]
    return body, response


def resulting_spec(body, response):
    patch = jsonpatch.JsonPatch(decode_patch(response))
    return patch.apply(copy.deepcopy(body["request"]["object"]))["spec"]


@pytest.mark.parametrize("case", OWNED, ids=[c.id for c in OWNED])
def test_case(case):
    body, response = answer(case)
    expected = case.expected
    assert response["allowed"] is expected["allowed"], response.get("status")
    if not expected["allowed"]:
        status = response["status"]
        assert not message_matches(expected, status["message"]), status["message"]
        assert status["code"] == expected["status_code"]
        return
    spec = resulting_spec(body, response)
    want = expected["podGroup"]
    assert spec.get("priority") == want["priority"]
    assert (spec.get("priorityClassName") or None) == want["priorityClassName"]
    assert "preemptionPolicy" not in spec  # a PodGroup has no such field


@pytest.mark.parametrize("case", VALIDATION, ids=[c.id for c in VALIDATION])
def test_validation_cases_pass_admission_unchanged_or_resolved(case):
    body, response = answer(case)
    assert response["allowed"] is True, response.get("status")
    if case.verb == "UPDATE":
        assert decode_patch(response) == []  # nothing carried over, nothing recomputed
        return
    spec = resulting_spec(body, response)
    by_name = {pc["metadata"]["name"]: pc["value"] for pc in case.stored_classes()}
    assert spec["priority"] == by_name[spec["priorityClassName"]]


def test_every_case_is_accounted_for():
    assert len(CASES) == len(OWNED) + len(VALIDATION) == 21
    assert {c.verb for c in VALIDATION} == {"CREATE", "UPDATE"}
