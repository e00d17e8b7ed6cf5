"""Property: no body, however wrong, gets a 5xx or an exception from the webhook."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import SYSTEM_CLASSES, ledger, pod, podgroup, priority_class, resource_quota
from tests.reviews import make_app, review

APP = make_app(
    [*SYSTEM_CLASSES, priority_class("d", value=3, default=True)],
    quotas=[resource_quota("q", hard={"cpu": "4", "pods": "3"}, namespace="team-a")],
    ledgers=[ledger(namespace="team-a", other={"cpu": "2"})],
)
PATHS = [
    "/mutate/pods",
    "/validate/priorityclasses",
    "/mutate/podgroups",
    "/validate/podgroups",
    # Offline (no API server), so it enrols nothing and decides as /validate/podgroups does.
    "/validate/podgroups-enrolment",
    "/validate/pods",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)
KEYS = {
    "request": [
        "object",
        "oldObject",
        "operation",
        "uid",
        "kind",
        "subResource",
        "name",
        "namespace",
        "dryRun",
    ],
    "object": ["spec", "metadata", "value", "globalDefault", "preemptionPolicy"],
    "oldObject": ["spec", "metadata", "value", "globalDefault", "preemptionPolicy"],
    "spec": [
        "priority",
        "priorityClassName",
        "preemptionPolicy",
        "minResources",
        "minMember",
        "queue",
        "containers",
    ],
    "oldSpec": ["priority", "priorityClassName", "preemptionPolicy", "minResources", "minMember"],
    "metadata": ["name", "namespace", "uid", "annotations"],
}
field_values = json_values | st.sampled_from(
    ["CREATE", "UPDATE", "DELETE", "Never", "d", "system-node-critical"]
)


@st.composite
def mangled_reviews(draw):
    """Well-formed AdmissionReviews with random values planted at random places."""
    body = review(
        draw(
            st.sampled_from(
                [
                    pod(namespace="team-a"),
                    pod(namespace="team-a", priority_class="d"),
                    priority_class("x", value=5),
                    podgroup("g", namespace="team-a", min_resources={"cpu": "1"}),
                ]
            )
        ),
        operation=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"])),
        old=draw(
            st.sampled_from(
                [
                    None,
                    pod(namespace="team-a", priority=3),
                    priority_class("x", value=5),
                    podgroup("g", namespace="team-a", min_member=2),
                ]
            )
        ),
        resource=draw(st.sampled_from(["pods", "priorityclasses"])),
    )
    request = body["request"]
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.sampled_from(["request", "object", "oldObject", "spec", "oldSpec", "metadata"]))
        target = {
            "request": request,
            "object": request.get("object"),
            "oldObject": request.get("oldObject"),
            "spec": (request.get("object") or {}).get("spec")
            if isinstance(request.get("object"), dict)
            else None,
            "oldSpec": (request.get("oldObject") or {}).get("spec")
            if isinstance(request.get("oldObject"), dict)
            else None,
            "metadata": (request.get("object") or {}).get("metadata")
            if isinstance(request.get("object"), dict)
            else None,
        }[where]
        if isinstance(target, dict):
            key = draw(st.sampled_from(KEYS[where]))
            target[key] = draw(field_values)
    return body


def check(path: str, data: bytes) -> None:
    resp = APP.test_client().post(path, data=data, content_type="application/json")
    assert resp.status_code < 500, resp.get_data(as_text=True)
    if resp.status_code == 200:
        answer = resp.get_json()["response"]
        assert answer.get("status", {}).get("code", 200) < 500, answer


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), body=mangled_reviews())
def test_random_admission_reviews_never_5xx(path, body):
    check(path, json.dumps(body).encode())


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(PATHS), doc=json_values)
def test_random_json_never_5xx(path, doc):
    check(path, json.dumps(doc).encode())


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(PATHS), data=st.binary(max_size=200))
def test_random_bytes_never_5xx(path, data):
    check(path, data)
