"""Tables for the PodGroup rules' answers to what a tenant may send: UPDATE keeps the stored
class (webhook/rules/podgroup_defaults.py), negative minResources are refused and never lower a
sum (webhook/rules/podgroup_quota.py, priogate/quota.py), and updates that claim nothing more
(finalizer removal, annotations, a terminating group) are never refused."""

from __future__ import annotations

from fractions import Fraction as F
from typing import Any

import jsonpatch
import orjson
import pytest

from priogate import quota
from priogate.kube.ledger_store import LedgerBusy
from priogate.ledger.memory import MemoryLedgerStore
from priogate.ledger.model import Entry, Ledger
from priogate.priority_table import MARKER_ANNOTATION
from priogate.resources import parse_resource_list
from tests.builders import SYSTEM_CLASSES, podgroup, priority_class, resource_quota
from tests.reviews import group_review, make_view
from webhook.review import Decision, parse_review
from webhook.rules import podgroup_defaults, podgroup_quota

CLASSES = [
    *SYSTEM_CLASSES,
    priority_class("batch", value=100, default=True),
    priority_class("high", value=1000),
]
TERMINATING = {"deletionTimestamp": "2026-11-23T00:00:00Z", "finalizers": []}


def group(name: str = "g", *, meta: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    # Raw spec fields (camelCase), malformed ones included: the rules under test read them.
    obj = podgroup(name, namespace="team-a", created=None)
    obj["spec"] = dict(spec)
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


@pytest.mark.parametrize("others", [{}, {"team": "a"}])
def test_a_create_the_policy_left_marked_is_resolved_and_unmarked(others):
    # webhook/priority_policy.py marks what its table cannot resolve; the stored group must not
    # keep the mark (the annotation guard would refuse the create with it).
    obj = group(meta={"annotations": {MARKER_ANNOTATION: "true", **others}}, minMember=2, queue="q")
    decision = decide(podgroup_defaults, obj)
    assert decision.allowed, decision.message
    stored = jsonpatch.apply_patch(obj, decision.patch)
    assert stored["metadata"]["annotations"] == others
    assert stored["spec"] == {"minMember": 2, "queue": "q", "priorityClassName": "batch"}


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


# ---- podgroup_quota: negative amounts ----------------------------------------------------------


def quota_view(store: Any = None, groups: list[dict] = (), cpu: str = "10") -> Any:
    return make_view(
        CLASSES,
        quotas=[resource_quota("compute", hard={"cpu": cpu}, namespace="team-a")],
        podgroups=groups,
        ledger_store=store or MemoryLedgerStore(),
    )


@pytest.mark.parametrize(
    ("min_resources", "field", "shown"),
    [
        ({"cpu": "-100"}, "cpu", '"-100"'),
        ({"cpu": -1}, "cpu", "-1"),
        ({"cpu": "-0.5"}, "cpu", '"-0.5"'),
        ({"memory": "-1Gi"}, "memory", '"-1Gi"'),
        # Within one group too: cpu 110 beside requests.cpu -100 would claim only 10.
        ({"cpu": "110", "requests.cpu": "-100"}, "requests.cpu", '"-100"'),
        ({"nvidia.com/gpu": "-1e3"}, "nvidia.com/gpu", '"-1e3"'),
    ],
)
def test_negative_amounts_are_refused_naming_field_and_value(min_resources, field, shown):
    store = MemoryLedgerStore()
    got = decide(podgroup_quota, group(minResources=min_resources), view=quota_view(store))
    assert not got.allowed
    assert (got.code, got.reason) == (422, "Invalid")
    assert got.message == (
        f'PodGroup.scheduling.volcano.sh "g" is invalid: spec.minResources.{field}: Invalid value: '
        f"{shown}: must be greater than or equal to 0 (a negative amount would lower the "
        "namespace's summed reservations)"
    )
    assert store.writes == 0


@pytest.mark.parametrize("amount", ["+5", "10", "0", "1e-3", "500m", 3])
def test_non_negative_amounts_pass(amount):
    assert decide(podgroup_quota, group(minResources={"cpu": amount}), view=quota_view()).allowed


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        # Stored before the check (or under Volcano's CRD): untouched, it stays writable.
        ({"cpu": "-100"}, {"cpu": "-100"}, True),
        ({"cpu": "-100"}, {"cpu": "-100000m"}, True),  # the same amount, spelled differently
        ({"cpu": "-100"}, {"cpu": "-200"}, False),
        ({"cpu": "1"}, {"cpu": "-1"}, False),
        ({"cpu": "-1"}, {"cpu": "-1", "memory": "-1"}, False),
        ({"cpu": "-1"}, {"cpu": "1"}, True),
    ],
)
def test_update_refuses_only_negative_amounts_it_sets(old, new, allowed):
    got = decide(
        podgroup_quota,
        group(meta={"annotations": {"a": "b"}}, minResources=new),
        group(minResources=old),
        view=quota_view(),
    )
    assert got.allowed is allowed, got.message


def entry(name: str, min_resources: dict[str, str]) -> Entry:
    return Entry(name, f"uid-{name}", min_resources, 1, "", "2026-11-22T00:00:00Z")


@pytest.mark.parametrize(
    ("stored", "cpu", "allowed"),
    [
        ({"cpu": "-100"}, "110", False),  # the stored -100 does not make room for 110
        ({"cpu": "-100"}, "10", True),  # it reserves nothing, so the whole quota is there
        ({"cpu": "-100"}, "11", False),
        ({"cpu": "4", "requests.cpu": "-4"}, "7", False),  # counts as cpu=4, not 0
        ({"cpu": "4", "requests.cpu": "-4"}, "6", True),
    ],
)
def test_a_stored_negative_entry_never_lowers_the_sum(stored, cpu, allowed):
    store = MemoryLedgerStore()
    store.ledgers["team-a"] = Ledger({"uid-legacy": entry("legacy", stored)})
    view = quota_view(store, groups=[group("legacy", minResources=stored)])
    got = decide(podgroup_quota, group("new", minResources={"cpu": cpu}), view=view)
    assert got.allowed is allowed, got.message


# ---- priogate/quota: the sums themselves ---------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "want"),
    [
        ({"cpu": "-1"}, {}),
        ({"cpu": "2", "requests.cpu": "-1"}, {"cpu": F(2), "requests.cpu": F(2)}),
        ({"memory": "-1Gi", "cpu": "0"}, {"cpu": F(0), "requests.cpu": F(0)}),
    ],
)
def test_quota_names_counts_a_negative_amount_as_zero(requests, want):
    assert quota.quota_names(parse_resource_list(requests), 0) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [({"cpu": "-1"}, {}), ({"cpu": "110", "requests.cpu": "-100"}, {"cpu": F(110)})],
)
def test_min_resources_of_counts_a_negative_amount_as_zero(raw, want):
    # What the controller's enqueue check reads a group's claim with.
    assert quota.min_resources_of(raw) == want


def test_check_podgroup_ignores_negative_demands_of_others():
    hand_built = quota.Reservation("neg", "", {"cpu": F(-100), "requests.cpu": F(-100)})
    this = quota.Reservation("big", "", {"cpu": F(11)})
    rq = {"metadata": {"name": "q"}, "spec": {"hard": {"cpu": "10"}}}
    problem = quota.check_podgroup([rq], [hand_built], this)
    assert problem and problem.startswith(
        "exceeded quota: q, requested: cpu=11, reserved: cpu=0, limited: cpu=10"
    )


# ---- podgroup_quota: updates that claim nothing more are never refused -----------------------------


class BrokenStore:
    """A ledger that cannot be written: busy (409s that never settle) or refused outright."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls = 0

    def update(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        raise self.error


@pytest.mark.parametrize(
    "error", [LedgerBusy("kept changing"), ValueError("not a ledger"), RuntimeError("namespace terminating")]
)
def test_terminating_group_updates_skip_the_ledger(error):
    store = BrokenStore(error)
    old = group(meta={**TERMINATING, "finalizers": ["example.com/hold"]}, minResources={"cpu": "100"})
    new = group(meta=TERMINATING, minResources={"cpu": "100"})
    assert decide(podgroup_quota, new, old, view=quota_view(store, cpu="1")) == Decision(True)
    assert store.calls == 0


@pytest.mark.parametrize(
    "error", [LedgerBusy("kept changing"), ValueError("not a ledger"), RuntimeError("forbidden")]
)
def test_an_update_claiming_no_more_is_allowed_when_the_ledger_cannot_be_written(error):
    store = BrokenStore(error)
    old = group(minResources={"cpu": "2"})
    same = group(meta={"annotations": {"a": "b"}, "finalizers": []}, minResources={"cpu": "2"})
    assert decide(podgroup_quota, same, old, view=quota_view(store)) == Decision(True)
    smaller = group(minResources={"cpu": "1"})
    assert decide(podgroup_quota, smaller, old, view=quota_view(store)) == Decision(True)
    assert store.calls == 2


@pytest.mark.parametrize(
    ("error", "code"), [(LedgerBusy("kept changing"), 429), (ValueError("not a ledger"), 503)]
)
def test_a_growing_update_still_fails_closed(error, code):
    old, grown = group(minResources={"cpu": "2"}), group(minResources={"cpu": "3"})
    got = decide(podgroup_quota, grown, old, view=quota_view(BrokenStore(error)))
    assert not got.allowed and got.code == code


# ---- podgroup_quota: refusals the stored groups already decide -----------------------------------


class CountingStore(MemoryLedgerStore):
    def __init__(self) -> None:
        super().__init__()
        self.turns = 0

    def update(self, *args: Any, **kwargs: Any) -> Any:
        self.turns += 1
        return super().update(*args, **kwargs)


def stored_groups(*cpus: str) -> list[dict]:
    return [
        podgroup(f"s{i}", namespace="team-a", min_member=1, min_resources={"cpu": cpu})
        for i, cpu in enumerate(cpus)
    ]


@pytest.mark.parametrize(
    ("stored", "claim", "refused_without_a_turn"),
    [
        (("4", "4"), "3", True),  # 8 stored + 3 > 10: no ledger could make room
        (("4", "4"), "2", False),  # fits the stored groups: the ledger decides, in a turn
        ((), "11", True),  # larger than the quota alone
        (("10",), "0", False),  # claims nothing: never refused
    ],
)
def test_a_claim_the_stored_groups_leave_no_room_for_takes_no_turn(stored, claim, refused_without_a_turn):
    store = CountingStore()
    got = decide(
        podgroup_quota,
        group("new", minResources={"cpu": claim}),
        view=quota_view(store, groups=stored_groups(*stored)),
    )
    if refused_without_a_turn:
        assert not got.allowed
        assert got.message.startswith("exceeded quota: compute, requested: cpu=")
        assert store.turns == 0 and store.writes == 0
    else:
        assert store.turns >= 1


def test_an_update_is_not_refused_for_its_own_stored_claim():
    """The group's own stored object is left out: raising 6 to 7 against a quota of 10 fits."""
    store = CountingStore()
    old = podgroup("mine", namespace="team-a", min_member=1, min_resources={"cpu": "6"})
    new = podgroup("mine", namespace="team-a", min_member=1, min_resources={"cpu": "7"})
    got = decide(podgroup_quota, new, old, view=quota_view(store, groups=[old]))
    assert got.allowed, got.message
