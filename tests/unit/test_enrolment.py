"""A namespace's first reservation: the enrolment hook labels the namespace, proves kube-apiserver
routes it to the quota hooks (the dry-run probe), then decides the claim as the reservation hook
does; the probe itself is only ever refused, and only recognised on a dry run (priogate.scope)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from priogate.kube.client import ApiError
from priogate.kube.namespaces import label_namespace
from priogate.ledger.memory import MemoryLedgerStore
from priogate.scope import COVERED, ENROLLED_LABEL, NOT_COVERED, PROBE_NAME, enrolled, probe_verdict
from tests.builders import podgroup, resource_quota
from tests.reviews import group_review, make_view
from webhook.review import Decision, parse_review
from webhook.rules import podgroup_enrolment, podgroup_quota

RESERVATION, ENROLMENT = podgroup_quota.RULE_SET.name, podgroup_enrolment.NAME


def refusal_by(hook: str, message: str) -> str:
    # As kube-apiserver words a webhook's refusal (ToStatusErr).
    return f'admission webhook "{hook}" denied the request: {message}'


class ScopeView:
    """make_view's caches and in-process ledger, with the API server's side of enrolment
    scripted: `routed` is what each probe finds (True: the reservation hook answered it)."""

    def __init__(self, routed: list[bool | None], cpu: str = "10", enroll_error: Exception | None = None):
        self.inner = make_view(
            quotas=[resource_quota("compute", hard={"cpu": cpu}, namespace="team-a")],
            ledger_store=MemoryLedgerStore(),
        )
        self.routed = list(routed)
        self.enroll_error = enroll_error
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def enroll(self, namespace: str, deadline: float) -> bool:
        self.calls.append(f"enroll {namespace}")
        if self.enroll_error is not None:
            raise self.enroll_error
        return True

    def probe_refusal(self, namespace: str) -> str | None:
        self.calls.append("probe")
        routed = self.routed.pop(0) if len(self.routed) > 1 else self.routed[0]
        if routed is None:
            return None
        return refusal_by(RESERVATION, COVERED) if routed else refusal_by(ENROLMENT, NOT_COVERED)


def group(name: str, cpu: str | None = "6", **meta: Any) -> dict[str, Any]:
    obj = podgroup(name, namespace="team-a", created=None)
    obj["spec"] = {"minMember": 1, **({"minResources": {"cpu": cpu}} if cpu else {})}
    obj["metadata"].update(meta)
    return obj


def decide(rule: Any, obj: dict, view: Any, *, dry_run: bool = False, old: dict | None = None) -> Decision:
    body = group_review(obj, dry_run=dry_run, operation="UPDATE" if old else "CREATE", old=old)
    return rule.admit(parse_review(orjson.dumps(body)), view)


def reserved(view: ScopeView) -> set[str]:
    ledger = view.inner.ledger_store.ledgers.get("team-a")
    return {e.group for e in ledger.entries.values()} if ledger else set()


@pytest.fixture(autouse=True)
def short_probe(monkeypatch):
    monkeypatch.setattr(podgroup_enrolment, "PROBE_SECONDS", 0.2)


@pytest.mark.parametrize(
    ("routed", "allowed", "code", "calls"),
    [
        # The informer sees the label at once: enrolled, proven, decided.
        ([True], True, 403, ["enroll team-a", "probe"]),
        # It lags two probes behind the write.
        ([False, False, True], True, 403, ["enroll team-a", "probe", "probe", "probe"]),
        # Something else answers the probe (a hook missing, another refusal): never proof.
        ([None], False, 429, None),
        # Never routed within the probe's time: refused with "retry"; the label stays written.
        ([False], False, 429, None),
    ],
    ids=["at-once", "after-lag", "no-verdict", "never"],
)
def test_the_first_claim_is_decided_only_once_routing_is_proven(routed, allowed, code, calls):
    view = ScopeView(routed)
    got = decide(podgroup_enrolment, group("six"), view)
    assert got.allowed is allowed, got
    assert view.calls[0] == "enroll team-a" and set(view.calls[1:]) == {"probe"}
    if calls is not None:
        assert view.calls == calls
    if allowed:
        assert reserved(view) == {"six"}
    else:
        assert got.code == code and "retry" in got.message and reserved(view) == set()
        # What the last probe met, so a probe that can never succeed is diagnosable.
        met = "admitted, by no quota hook" if routed == [None] else refusal_by(ENROLMENT, NOT_COVERED)
        assert f"(last probe: {met}" in got.message, got.message


def test_a_first_claim_over_the_quota_is_refused_after_enrolment_with_the_quota_message():
    view = ScopeView([True], cpu="4")
    got = decide(podgroup_enrolment, group("six"), view)
    assert not got.allowed and got.code == 403 and "limited: cpu=4" in got.message, got
    assert view.calls == ["enroll team-a", "probe"]


def test_an_invalid_first_claim_is_refused_before_anything_is_enrolled():
    view = ScopeView([True])
    got = decide(podgroup_enrolment, group("neg", cpu="-1"), view)
    assert not got.allowed and got.code == 422 and "must be greater than or equal to 0" in got.message, got
    assert view.calls == [] and reserved(view) == set()


def test_first_claims_beyond_the_enrolling_threads_are_refused_with_retry_at_once():
    # The probes need free threads of the same server: never all of them enrolling.
    view = ScopeView([True])
    held = [
        podgroup_enrolment._enrolling.acquire(blocking=False)
        for _ in range(podgroup_enrolment.ENROLLING_AT_ONCE)
    ]
    try:
        assert all(held)
        got = decide(podgroup_enrolment, group("six"), view)
        assert not got.allowed and got.code == 429 and got.message.endswith("retry"), got
        assert view.calls == [] and reserved(view) == set()
    finally:
        for _ in held:
            podgroup_enrolment._enrolling.release()
    assert decide(podgroup_enrolment, group("six"), view).allowed


def test_enrolment_failing_refuses_with_retry_and_probes_nothing():
    view = ScopeView([True], enroll_error=ApiError(403, "Forbidden", "namespaces is forbidden"))
    got = decide(podgroup_enrolment, group("six"), view)
    assert not got.allowed and got.code == 503 and got.message.endswith("retry"), got
    assert view.calls == ["enroll team-a"] and reserved(view) == set()


@pytest.mark.parametrize(
    ("obj", "old", "dry_run"),
    [
        (group("six"), None, True),  # decides, writes nothing: no label either
        # A terminating group's finalizer removal (a group stored before enrolment existed).
        (
            group("six", deletionTimestamp="2026-11-23T00:00:00Z", finalizers=[]),
            group("six", deletionTimestamp="2026-11-23T00:00:00Z", finalizers=["example.com/hold"]),
            False,
        ),
    ],
    ids=["dry-run", "terminating"],
)
def test_requests_that_write_no_claim_enrol_nothing(obj, old, dry_run):
    view = ScopeView([True])
    got = decide(podgroup_enrolment, obj, view, dry_run=dry_run, old=old)
    assert got.allowed, got
    assert view.calls == [] and reserved(view) == set()


@pytest.mark.parametrize(
    ("rule", "name", "dry_run", "message"),
    [
        (podgroup_quota, PROBE_NAME, True, COVERED),
        (podgroup_enrolment, PROBE_NAME, True, NOT_COVERED),
        # Not a dry run: an ordinary PodGroup of that name, decided as any other.
        (podgroup_quota, PROBE_NAME, False, None),
        (podgroup_enrolment, PROBE_NAME, False, None),
        # A dry run of another name: decided as any other.
        (podgroup_quota, "probe", True, None),
        (podgroup_enrolment, "probe", True, None),
    ],
)
def test_a_probe_is_only_ever_refused_and_only_on_a_dry_run(rule, name, dry_run, message):
    view = ScopeView([True])
    got = decide(rule, group(name, cpu="0"), view, dry_run=dry_run)
    if message is None:
        assert got.allowed, got
    else:
        assert not got.allowed and got.message == message, got
        assert view.calls == [] and reserved(view) == set()


@pytest.mark.parametrize(
    ("refusal", "verdict"),
    [
        (refusal_by(RESERVATION, COVERED), True),
        (refusal_by(ENROLMENT, NOT_COVERED), False),
        (None, None),
        # The right words from the wrong hook (a tenant's own webhook, say) prove nothing.
        (refusal_by("other.example.com", COVERED), None),
        (refusal_by(ENROLMENT, COVERED), None),
        ('podgroups "priogate-coverage-probe" is forbidden: exceeded quota', None),
    ],
)
def test_probe_verdict(refusal, verdict):
    assert probe_verdict(refusal, RESERVATION, ENROLMENT) is verdict


@pytest.mark.parametrize(
    ("labels", "want"),
    [(None, False), ({}, False), ({ENROLLED_LABEL: "false"}, False), ({ENROLLED_LABEL: "true"}, True)],
)
def test_enrolled(labels, want):
    assert enrolled(labels) is want


class PatchServer:
    """Answers each PATCH with the next scripted status (200: the namespace)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[Any] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        assert (method, path, kw["content_type"]) == (
            "PATCH",
            "/api/v1/namespaces/team-a",
            "application/merge-patch+json",
        )
        self.bodies.append(kw["body"])
        status = self.statuses.pop(0)
        if status != 200:
            raise ApiError(status, "x", "scripted")
        return {"metadata": {"labels": kw["body"]["metadata"]["labels"]}}


@pytest.mark.parametrize(
    ("statuses", "deadline", "patches", "raised"),
    [
        ([200], 10.0, 1, None),
        ([409, 429, 503, 200], 10.0, 4, None),  # conflicts and throttling are retried
        ([403], 10.0, 1, 403),  # no right to label: not retried
        ([409, 409, 409], 0.2, 3, 409),  # the deadline ends the retries
    ],
)
def test_label_namespace_retries_what_may_pass(statuses, deadline, patches, raised):
    server = PatchServer(statuses)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    call = lambda: label_namespace(server, "team-a", deadline=deadline, clock=lambda: now[0], sleep=sleep)  # noqa: E731
    if raised is None:
        assert enrolled(call()["metadata"]["labels"])
    else:
        with pytest.raises(ApiError) as e:
            call()
        assert e.value.status == raised
    assert len(server.bodies) == patches
    assert server.bodies[0] == {"metadata": {"labels": {ENROLLED_LABEL: "true"}}}
