"""The HTTP envelope: AdmissionReview versions, uid echo, patches, 4xx for bad input, health."""

from __future__ import annotations

import io
import json

import jsonpatch
import pytest

from tests.builders import SYSTEM_CLASSES, pod, priority_class
from tests.reviews import decode_patch, make_app, make_view, review
from webhook.review import caller_timeout

CLASSES = [*SYSTEM_CLASSES, priority_class("high", value=1000), priority_class("low", value=10, default=True)]


@pytest.fixture
def client():
    return make_app(CLASSES).test_client()


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_answers_in_the_request_version_and_echoes_uid(client, version):
    body = review(pod(namespace="team-a", priority_class="high"), api_version=version)
    answer = client.post("/mutate/pods", json=body).get_json()
    assert answer["apiVersion"] == version
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    assert answer["response"]["patchType"] == "JSONPatch"


def test_patch_applies_and_defaults_class_name(client):
    obj = pod(namespace="team-a")
    answer = client.post("/mutate/pods", json=review(obj)).get_json()["response"]
    patched = jsonpatch.apply_patch(obj, decode_patch(answer))
    assert patched["spec"]["priority"] == 10
    assert patched["spec"]["priorityClassName"] == "low"
    assert patched["spec"]["preemptionPolicy"] == "PreemptLowerPriority"


def test_pod_without_spec_gets_one(client):
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "n"}}
    answer = client.post("/mutate/pods", json=review(obj)).get_json()["response"]
    assert jsonpatch.apply_patch(obj, decode_patch(answer))["spec"]["priority"] == 10


def test_idempotent_under_reinvocation(client):
    obj = pod(namespace="team-a", priority_class="high")
    first = client.post("/mutate/pods", json=review(obj)).get_json()["response"]
    once = jsonpatch.apply_patch(obj, decode_patch(first))
    second = client.post("/mutate/pods", json=review(once)).get_json()["response"]
    assert second["allowed"] is True
    assert "patch" not in second


def test_denial_carries_status(client):
    answer = client.post(
        "/mutate/pods", json=review(pod(namespace="team-a", priority_class="nope"))
    ).get_json()["response"]
    assert answer["allowed"] is False
    assert answer["status"] == {
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": 'pods "p" is forbidden: no PriorityClass with name nope was found',
    }


def test_warning_on_new_global_default(client):
    body = review(priority_class("new-default", value=5, default=True), resource="priorityclasses")
    answer = client.post("/validate/priorityclasses", json=body).get_json()["response"]
    assert answer["allowed"] is False  # "low" is already the default
    body = review(
        priority_class("low", value=10, default=True),
        operation="UPDATE",
        old=priority_class("low", value=10, default=True),
        resource="priorityclasses",
    )
    assert client.post("/validate/priorityclasses", json=body).get_json()["response"]["allowed"] is True


def test_deleting_the_default_warns(client):
    body = review(
        None,
        operation="DELETE",
        old=priority_class("low", value=10, default=True),
        resource="priorityclasses",
    )
    answer = client.post("/validate/priorityclasses", json=body).get_json()["response"]
    assert answer["allowed"] is True
    assert "priority 0" in answer["warnings"][0]


@pytest.mark.parametrize(
    ("data", "content_type", "fragment"),
    [
        (b"{not json", "application/json", "not valid JSON"),
        (b"[]", "application/json", "must be a JSON object"),
        (b'{"kind": "Pod"}', "application/json", "expected kind AdmissionReview"),
        (b'{"kind": "AdmissionReview", "apiVersion": "v2"}', "application/json", "unsupported apiVersion"),
        (b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}', "application/json", "request"),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u"}}',
            "application/json",
            "request.operation",
        ),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"operation":"CREATE"}}',
            "application/json",
            "request.uid",
        ),
        (b"{}", "text/plain", "Content-Type must be application/json"),
        (b"\xff\xfe", "application/json", "not valid JSON"),
    ],
)
def test_bad_bodies_get_400_with_one_line_reason(client, data, content_type, fragment):
    resp = client.post("/mutate/pods", data=data, content_type=content_type)
    assert resp.status_code == 400
    text = resp.get_data(as_text=True)
    assert fragment in text
    assert text.count("\n") == 1


def test_malformed_object_is_a_400_denial(client):
    body = review(pod(namespace="team-a"))
    body["request"]["object"]["spec"] = ["not", "a", "map"]
    answer = client.post("/mutate/pods", json=body).get_json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 400
    assert "object.spec must be an object" in answer["status"]["message"]


def test_huge_body_is_413(client):
    resp = client.post(
        "/mutate/pods", data=b"{" + b" " * (4 * 1024 * 1024) + b"}", content_type="application/json"
    )
    assert resp.status_code == 413


def test_unknown_path_and_method(client):
    assert client.post("/mutate/nothing", json={}).status_code == 404
    resp = client.get("/mutate/pods")
    assert resp.status_code == 405
    assert resp.headers["Allow"] == "POST"


def test_content_type_parameters_are_accepted(client):
    body = json.dumps(review(pod(namespace="team-a", priority_class="high")))
    resp = client.post("/mutate/pods", data=body, content_type="Application/JSON; charset=utf-8")
    assert resp.status_code == 200
    assert resp.get_json()["response"]["allowed"] is True


def _call(app, body: bytes, **environ: object) -> tuple[str, bytes]:
    """Drive the WSGI app with a hand-made environ (a chunked body has no CONTENT_LENGTH)."""
    seen: list[str] = []
    env = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/mutate/pods",
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "https",
        "SERVER_NAME": "test",
        "SERVER_PORT": "8443",
        "SERVER_PROTOCOL": "HTTP/1.1",
        **environ,
    }
    out = b"".join(app(env, lambda status, headers: seen.append(status)))
    return seen[0], out


def test_chunked_body_is_read_to_its_end():
    body = json.dumps(review(pod(namespace="team-a", priority_class="high"))).encode()
    status, out = _call(make_app(CLASSES), body, **{"wsgi.input_terminated": True})
    assert status == "200 OK"
    assert json.loads(out)["response"]["allowed"] is True


def test_chunked_body_over_the_cap_is_413():
    status, out = _call(make_app(CLASSES), b" " * (3 * 1024 * 1024 + 1), **{"wsgi.input_terminated": True})
    assert status.startswith("413")
    assert b"body larger than" in out


def test_unparseable_content_length_is_400():
    status, out = _call(make_app(CLASSES), b"{}", CONTENT_LENGTH="lots")
    assert status.startswith("400")
    assert b"Content-Length must be a number" in out


def test_health_ready_metrics(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    client.post("/mutate/pods", json=review(pod(namespace="team-a")))
    text = client.get("/metrics").get_data(as_text=True)
    assert (
        'priogate_webhook_requests_total{decision="allow",operation="CREATE",webhook="pod-priority.priogate.io"}'
        in text
    )


def test_not_ready_until_synced():
    client = make_app(CLASSES, synced=False).test_client()
    resp = client.get("/readyz")
    assert resp.status_code == 503
    assert "priorityclasses" in resp.get_data(as_text=True)


def test_unsynced_cache_denies_instead_of_guessing(monkeypatch):
    monkeypatch.setattr("webhook.endpoints.CACHE_SYNC_GRACE_SECONDS", 0.01)
    client = make_app(CLASSES, synced=False).test_client()
    answer = client.post("/mutate/pods", json=review(pod(namespace="team-a"))).get_json()["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 503
    assert "not synced" in answer["status"]["message"]


def test_update_preserves_priority_but_not_class(client):
    old = pod(namespace="team-a", priority_class="high", priority=1000, preemption_policy="Never")
    new = pod(namespace="team-a", priority_class="high")
    answer = client.post("/mutate/pods", json=review(new, operation="UPDATE", old=old)).get_json()["response"]
    patched = jsonpatch.apply_patch(new, decode_patch(answer))
    assert patched["spec"]["priority"] == 1000
    assert patched["spec"]["preemptionPolicy"] == "Never"


def test_dry_run_is_answered_the_same(client):
    answer = client.post("/mutate/pods", json=review(pod(namespace="team-a"), dry_run=True)).get_json()[
        "response"
    ]
    assert json.loads(__import__("base64").b64decode(answer["patch"]))


@pytest.mark.parametrize(
    ("query", "seconds"),
    [
        ("timeout=10s", 10.0),
        ("dryRun=All&timeout=30s", 30.0),
        ("timeout=500ms", 0.5),
        ("timeout=2m", 120.0),
        ("timeout=soon", None),
        ("", None),
        ("timeouts=5s", None),
    ],
)
def test_callers_timeout_is_read_from_the_query(query, seconds):
    assert caller_timeout(query) == seconds


def test_rule_sets_see_the_callers_deadline():
    import time

    from webhook.app import create_app
    from webhook.registry import RuleSet
    from webhook.review import deny

    def report(request, view):
        left = None if request.deadline is None else round(request.deadline - time.monotonic())
        return deny(f"left {left}")

    echo = RuleSet(
        "echo.priogate.io", "/validate/echo", "validating", report, ("",), ("v1",), ("pods",), ("CREATE",)
    )
    client = create_app(make_view(CLASSES), rule_sets=[echo]).test_client()
    with_timeout = client.post("/validate/echo?timeout=10s", json=review(pod(namespace="team-a"))).get_json()[
        "response"
    ]
    assert with_timeout["status"]["message"] == "left 10"
    without = client.post("/validate/echo", json=review(pod(namespace="team-a"))).get_json()["response"]
    assert without["status"]["message"] == "left None"


def test_slow_admissions_are_logged(monkeypatch):
    import time

    from structlog.testing import capture_logs

    from webhook.app import create_app
    from webhook.registry import RuleSet
    from webhook.review import allow

    def slow(request, view):
        time.sleep(0.05)
        return allow()

    monkeypatch.setattr("webhook.endpoints.SLOW_SECONDS", 0.02)
    rule = RuleSet(
        "slow.priogate.io", "/validate/slow", "validating", slow, ("",), ("v1",), ("pods",), ("CREATE",)
    )
    client = create_app(make_view(CLASSES), rule_sets=[rule]).test_client()
    with capture_logs() as logs:
        assert client.post("/validate/slow", json=review(pod(namespace="team-a"))).status_code == 200
    slow_lines = [e for e in logs if e["event"] == "slow admission"]
    assert len(slow_lines) == 1
    assert slow_lines[0]["webhook"] == "slow.priogate.io" and slow_lines[0]["seconds"] >= 0.05
