"""The preemption preview: its pure summary (priogate/preemption_preview.py), the rule set on an
in-process app (webhook/rules/preemption_preview.py, over static caches), and its registration
(webhook.policy: off unless turned on, advisory when on)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from priogate.preemption.engine import GANG_MEMBER, NOT_PENDING, PENDING_GROUP
from priogate.preemption.outcome import Outcome, fits, unresolved
from priogate.preemption.records import PodInfo
from priogate.preemption_preview import MAX_WARNING_CHARS, PREFIX, pending, shown, warning
from tests.builders import node, pod, podgroup, priority_class
from tests.reviews import fed_cache, group_review, make_view, review
from webhook import preview_state
from webhook.app import create_app
from webhook.configuration import webhook_configurations
from webhook.policy import PREVIEW_HOOKS, WebhookPolicy
from webhook.preview_state import MAX_BACKLOG, PreviewState
from webhook.registry import load_rule_sets
from webhook.rules import podgroup_preemption_preview, preemption_preview
from webhook.view import CacheView

NOW = "2026-01-01T00:10:00Z"


def victim(namespace: str, name: str, priority: int) -> PodInfo:
    return PodInfo(
        key=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        labels={},
        priority=priority,
        preemption_policy="PreemptLowerPriority",
        priority_note="",
        requests={},
        node_name="n1",
        nominated_node="",
        phase="Running",
        terminating=False,
        preempted_by_scheduler=False,
        start_time=0.0,
        created=0.0,
        protected="",
        opted_out=False,
        group="",
        node_selector={},
        affinity=None,
        tolerations=(),
        gated=False,
    )


def preempting(*victims: PodInfo) -> Outcome:
    return Outcome("t/p", "preempt", "preempts", node="n1", placements={"t/p": "n1"}, victims=victims)


# ---- the summary ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome, what, expected",
    [
        (fits("t/p"), "pod", None),
        (unresolved("t/p", NOT_PENDING), "pod", None),  # bound to a node: not a preemptor
        (unresolved("t/p", GANG_MEMBER), "pod", None),  # its PodGroup decides for it
        (unresolved("podgroup:t/g", PENDING_GROUP), "PodGroup", None),
        (preempting(), "pod", None),
        (
            preempting(victim("a", "x", 10)),
            "pod",
            f"{PREFIX} placing this pod would preempt 1 pod in namespace a (highest priority 10)",
        ),
        (
            preempting(victim("b", "x", 10), victim("a", "y", 1000), victim("a", "z", -5)),
            "pod",
            f"{PREFIX} placing this pod would preempt 3 pods in namespaces a, b (highest priority 1000)",
        ),
        (
            preempting(*(victim(f"ns{i}", "x", i) for i in range(7))),
            "PodGroup",
            f"{PREFIX} placing this PodGroup would preempt 7 pods in namespaces ns0, ns1, ns2, ns3, ns4"
            " and 2 more (highest priority 6)",
        ),
        (
            unresolved("t/p", "0/3 nodes are available: 3 Insufficient cpu"),
            "pod",
            f"{PREFIX} this pod would stay pending: 0/3 nodes are available: 3 Insufficient cpu",
        ),
    ],
)
def test_the_warning_counts_the_victims_their_namespaces_and_highest_priority(outcome, what, expected):
    assert warning(outcome, what) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        ("team-a", "team-a"),
        ("a.b", "a.b"),
        ('x", injected', '"x\\", injected"'),
        ("line\nbreak", '"line\\nbreak"'),
        ("Upper", '"Upper"'),
        ("-dash", '"-dash"'),
    ],
)
def test_a_name_no_api_server_would_store_is_quoted(name, expected):
    assert shown(name) == expected


def test_a_long_warning_is_cut_to_what_kube_apiserver_keeps():
    long_reason = "0/3 nodes are available: " + "x" * 400
    text = warning(unresolved("t/p", long_reason))
    assert text is not None and len(text) == MAX_WARNING_CHARS and text.endswith("...")
    many = preempting(*(victim("n" * 60 + str(i), "x", 1) for i in range(9)))
    text = warning(many)
    assert text is not None and len(text) <= MAX_WARNING_CHARS


@pytest.mark.parametrize(
    "obj, kind, name, phase",
    [
        ({"metadata": {"name": "p", "uid": "u", "resourceVersion": "1"}, "spec": {}}, "Pod", "p", "Pending"),
        ({"metadata": {"generateName": "job-"}, "spec": {}}, "Pod", "job-hypothetical", "Pending"),
        ({"metadata": {"name": "g"}, "spec": {"minMember": 2}}, "PodGroup", "g", "Inqueue"),
        ({"metadata": {"name": "g"}, "status": {"phase": "Pending"}}, "PodGroup", "g", "Pending"),
        ({"spec": {}}, "Pod", "hypothetical", "Pending"),
    ],
)
def test_the_pending_object_is_what_the_create_would_store(obj, kind, name, phase):
    given = copy.deepcopy(obj)
    out = pending(obj, kind, "t", NOW)
    meta = out["metadata"]
    assert (meta["name"], meta["namespace"], meta["creationTimestamp"]) == (name, "t", NOW)
    assert "uid" not in meta and "resourceVersion" not in meta
    assert out["status"] == {"phase": phase}
    assert obj == given  # the request's object is left alone


# ---- the rule set --------------------------------------------------------------------------------

HIGH = priority_class("high", value=1000)


def preview_view(pods: list[dict[str, Any]], groups: list[dict[str, Any]] = ()) -> CacheView:
    view = make_view([HIGH], podgroups=groups)
    extra = {
        "nodes": fed_cache("nodes", [node("n1", cpu="2"), node("n2", cpu="2")]),
        "preemption-pods": fed_cache("preemption-pods", pods),
        "pdbs": fed_cache("pdbs", []),
    }
    return CacheView({**view.caches, **extra}, view.ledger_store)


FULL = [
    pod("a1", namespace="a", priority=8, cpu="2", node="n1"),
    pod("b1", namespace="b", priority=5, cpu="1", node="n2"),
    pod("b2", namespace="b", priority=7, cpu="1", node="n2"),
]


def ask(view: CacheView, obj: dict[str, Any], *, dry_run: bool = True, group: bool = False) -> dict:
    rule_set = podgroup_preemption_preview.RULE_SET if group else preemption_preview.RULE_SET
    app = create_app(view, [rule_set])
    body = (group_review if group else review)(obj, dry_run=dry_run)
    answer = app.test_client().post(rule_set.path, json=body).get_json()["response"]
    assert answer["allowed"] is True and "patch" not in answer
    return answer


def urgent(name: str = "u", cpu: str = "2", **kw: Any) -> dict[str, Any]:
    return pod(name, namespace="t", priority=1000, priority_class="high", cpu=cpu, created=None, **kw)


def test_a_dry_run_pod_that_needs_preemption_is_warned_with_its_victims():
    answer = ask(preview_view(FULL), urgent())
    assert answer["warnings"] == [
        f"{PREFIX} placing this pod would preempt 2 pods in namespace b (highest priority 7)"
    ]


def test_a_dry_run_pod_that_fits_a_real_create_and_a_bound_pod_get_no_warning():
    view = preview_view(FULL[:1])
    assert "warnings" not in ask(view, urgent())  # fits on n2
    assert "warnings" not in ask(preview_view(FULL), urgent(), dry_run=False)
    assert "warnings" not in ask(preview_view(FULL), urgent(node="n1"))


def test_a_pod_too_big_for_any_node_is_told_it_stays_pending():
    (text,) = ask(preview_view(FULL), urgent(cpu="3"))["warnings"]
    assert text == (
        f"{PREFIX} this pod would stay pending: preemption is not helpful: 0/2 nodes are available:"
        " 2 Insufficient cpu even after preempting every lower-priority pod"
    )


def test_a_pod_of_an_existing_name_leaves_the_cached_one_alone():
    view = preview_view(FULL)
    assert "warnings" not in ask(view, pod("b1", namespace="b", priority=1000, cpu="2", created=None))
    # the real b1 is still a victim afterwards
    assert "2 pods in namespace b" in ask(view, urgent())["warnings"][0]


def test_a_dry_run_podgroup_with_pending_members_is_warned():
    members = [pod(f"m{i}", namespace="t", priority=1000, cpu="1", group="g") for i in range(2)]
    group = podgroup("g", namespace="t", min_member=2, priority_class="high", created=None)
    answer = ask(preview_view(FULL + members), group, group=True)
    assert answer["warnings"] == [
        f"{PREFIX} placing this PodGroup would preempt 2 pods in namespace b (highest priority 7)"
    ]


def test_without_its_caches_the_preview_warns_nothing_and_never_refuses():
    view = make_view([HIGH])  # the quota server's caches only: no nodes
    assert "warnings" not in ask(view, urgent())
    unlisted = preview_view(FULL)
    unlisted.caches["nodes"] = fed_cache("nodes", synced=False)
    assert "warnings" not in ask(unlisted, urgent())
    assert "warnings" not in ask(preview_view(FULL), {"metadata": {"name": "x"}, "spec": "not an object"})


# ---- registration --------------------------------------------------------------------------------


@pytest.mark.parametrize("plugin", [True, False])
def test_the_preview_hooks_are_registered_only_when_turned_on_and_never_block(plugin):
    def hooks(policy: WebhookPolicy) -> dict[str, dict]:
        configs = webhook_configurations("https://x", b"", policy=policy)
        return {h["name"]: h for c in configs for h in c["webhooks"]}

    assert not PREVIEW_HOOKS & set(hooks(WebhookPolicy.for_mode(priority_plugin=plugin)))
    on = hooks(WebhookPolicy.for_mode(priority_plugin=plugin, preemption_preview=True))
    resources = {}
    for name in PREVIEW_HOOKS:
        hook = on[name]
        assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
        assert hook["timeoutSeconds"] <= 2
        assert hook["matchConditions"] == [{"name": "dry-run-only", "expression": "request.dryRun == true"}]
        (rule,) = hook["rules"]
        assert rule["operations"] == ["CREATE"]
        resources[name] = (*rule["apiGroups"], *rule["resources"])
    assert resources == {
        "preemption-preview.priogate.io": ("", "pods"),
        "podgroup-preemption-preview.priogate.io": ("scheduling.volcano.sh", "podgroups"),
    }
    in_cluster = WebhookPolicy.in_cluster(plugin, "priogate-system", preemption_preview=True)
    assert in_cluster.registers(preemption_preview.RULE_SET)


def test_the_preview_is_served_apart_from_the_quota_and_priority_rule_sets():
    assert {r.name for r in load_rule_sets(servers=["preview"])} == PREVIEW_HOOKS
    assert not PREVIEW_HOOKS & {r.name for r in load_rule_sets(servers=["priority", "quota"])}
    assert all(r.advisory for r in load_rule_sets(servers=["preview"]))


# ---- the live state between previews -------------------------------------------------------------


def live_view() -> CacheView:
    view = preview_view([])
    return CacheView(view.caches, view.ledger_store, preview=PreviewState.attach(view.caches))


@pytest.mark.parametrize("backlog", [MAX_BACKLOG, 1])
def test_events_between_previews_reach_the_next_one(monkeypatch, backlog):
    monkeypatch.setattr(preview_state, "MAX_BACKLOG", backlog)
    view = live_view()
    assert "warnings" not in ask(view, urgent())  # empty nodes: it fits, and the state is built
    for obj in FULL:  # the watch hears of three pods; with a backlog of 1 the state is dropped
        view.caches["preemption-pods"].apply_event("ADDED", obj)
    assert ask(view, urgent())["warnings"] == [
        f"{PREFIX} placing this pod would preempt 2 pods in namespace b (highest priority 7)"
    ]
    view.caches["preemption-pods"].apply_event("DELETED", FULL[2])
    assert "1 pod in namespace b (highest priority 5)" in ask(view, urgent())["warnings"][0]


def test_no_event_is_queued_before_the_first_preview():
    view = live_view()
    for obj in FULL:
        view.caches["preemption-pods"].apply_event("ADDED", obj)
    assert not view._preview._backlog  # type: ignore[union-attr]
