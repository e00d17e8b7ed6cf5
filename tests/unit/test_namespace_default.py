"""A default PriorityClass per namespace (priogate.namespace_default): the pure rules as tables,
each hook that applies it (plugin replaced: the pod priority, PodGroup defaults and native
PodGroup hooks; plugin kept: the namespace default hook), the label hook, and the controller's
label backstop."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.caches import Caches
from controller.namespace_default import DefaultClassLabeller
from priogate import namespace_default as nd
from priogate.kube.cache import WatchCache
from priogate.kube.client import ApiError
from priogate.slim import namespace_labels
from tests.builders import pod, priority_class
from tests.reviews import group_review, make_view, review
from webhook.review import Decision, parse_review
from webhook.rules import namespace_default_class, namespace_default_label, pod_priority, podgroup_defaults
from webhook.rules import namespace_default_native as native_rule

KEY = nd.ANNOTATION
CLASSES = [
    priority_class("everyday", value=100, default=True),
    priority_class("batch", value=10, preemption_policy="Never"),
    priority_class("gold", value=1000),
]
MISSING_GOLDEN = "no PriorityClass with name golden was found: it is the default of namespace team-a " + (
    f"(annotation {KEY})"
)


def namespace(
    name: str = "team-a", *, default: str | None = None, label: str | None = None, **labels: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "7"}
    if default is not None:
        meta["annotations"] = {KEY: default, "other": "x"}
    if label is not None:
        labels = {**labels, KEY: label}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def view(default: str | None, classes: list[dict[str, Any]] = CLASSES) -> Any:
    return make_view(classes, namespaces=[namespace_labels(namespace(default=default))])


def managed(*fields: str, manager: str = "kubectl-create") -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {f"f:{f}": {} for f in fields}, "f:metadata": {"f:labels": {}}},
        }
    ]


# ---- the pure rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        (None, None),
        (namespace(), None),
        (namespace(default="gold"), "gold"),
        (namespace(default=""), None),  # an empty name is no name, as for priorityClassName
        ({"metadata": {"annotations": {KEY: 5}}}, None),
    ],
)
def test_default_class(obj, want):
    assert nd.default_class(obj) == want


@pytest.mark.parametrize(
    ("obj", "out_of_step", "patch_labels"),
    [
        (namespace(), False, {KEY: None}),
        (namespace(default="gold", label="true"), False, {KEY: "true"}),
        (namespace(default="gold"), True, {KEY: "true"}),  # annotated before the hook existed
        (namespace(default="gold", label="false"), True, {KEY: "true"}),
        (namespace(label="true"), True, {KEY: None}),  # left behind: every pod would pay a call
        (namespace(label="no"), True, {KEY: None}),
        (namespace(default="", label="true"), True, {KEY: None}),
    ],
)
def test_the_label_follows_the_annotation(obj, out_of_step, patch_labels):
    assert nd.label_out_of_step(obj) is out_of_step
    assert nd.label_merge_patch(obj) == {"metadata": {"labels": patch_labels, "resourceVersion": "7"}}


@pytest.mark.parametrize(
    ("entries", "want"),
    [
        (None, set()),
        ([], set()),
        (managed(), set()),
        (managed("containers", "priorityClassName"), {"containers", "priorityClassName"}),
        (managed("priority") + managed("preemptionPolicy", manager="x"), {"priority", "preemptionPolicy"}),
        ([{"fieldsV1": "garbage"}, "x", {"fieldsV1": {"f:spec": []}}], set()),
    ],
)
def test_client_set_spec_fields(entries, want):
    obj = {"metadata": {"managedFields": entries} if entries is not None else {}}
    assert nd.client_set_spec_fields(obj) == want


EVERYDAY = CLASSES[0]


@pytest.mark.parametrize(
    ("class_name", "fields", "default", "want"),
    [
        ("", None, EVERYDAY, True),  # nothing named, no default class either (or none yet)
        ("", None, None, True),
        ("everyday", managed("containers"), EVERYDAY, True),  # the plugin's fill-in
        ("everyday", managed("containers", "priorityClassName"), EVERYDAY, False),  # named by the client
        ("gold", managed("containers"), EVERYDAY, False),  # not the globalDefault: named
        ("gold", None, EVERYDAY, False),  # no managedFields at all: only the default's name is replaced
        ("everyday", None, EVERYDAY, True),
        ("everyday", managed("containers"), None, False),  # the cache has no default: named
    ],
)
def test_filled_by_plugin(class_name, fields, default, want):
    obj = pod("p", namespace="team-a", priority_class=class_name or None)
    if fields is not None:
        obj["metadata"]["managedFields"] = fields
    assert nd.filled_by_plugin(obj, default) is want


def test_the_missing_default_names_the_class_the_namespace_and_the_annotation():
    e = nd.DefaultClassNotFound("golden", "team-a")
    assert str(e) == MISSING_GOLDEN
    assert isinstance(e, LookupError) and e.name == "golden"


def test_the_namespace_cache_keeps_the_annotation_and_nothing_else_of_them():
    kept = namespace_labels(namespace(default="gold", label="true"))
    assert kept["metadata"]["annotations"] == {KEY: "gold"}
    assert namespace_labels(namespace())["metadata"].get("annotations") is None


# ---- plugin replaced: the pod priority hook ---------------------------------------------------


def decide(rule: Any, body: dict[str, Any], v: Any) -> Decision:
    return rule.admit(parse_review(orjson.dumps(body)), v)


def applied(obj: dict[str, Any], decision: Decision) -> dict[str, Any]:
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(copy.deepcopy(obj), decision.patch)


def resolved(obj: dict[str, Any]) -> tuple[str, int, str]:
    spec = obj["spec"]
    return spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]


@pytest.mark.parametrize(
    ("default", "named", "want"),
    [
        ("batch", None, ("batch", 10, "Never")),  # the namespace's class, not the globalDefault
        ("batch", "gold", ("gold", 1000, "PreemptLowerPriority")),  # a named class wins
        ("batch", "everyday", ("everyday", 100, "PreemptLowerPriority")),
        (None, None, ("everyday", 100, "PreemptLowerPriority")),  # no annotation: upstream's
    ],
)
def test_the_pod_priority_hook_resolves_the_namespace_default(default, named, want):
    obj = pod("p", namespace="team-a", priority_class=named)
    out = applied(obj, decide(pod_priority, review(obj), view(default)))
    assert resolved(out) == want


def test_the_pod_priority_hook_refuses_a_missing_default_and_a_disagreeing_preset():
    obj = pod("p", namespace="team-a")
    d = decide(pod_priority, review(obj), view("golden"))
    assert not d.allowed and d.message == f'pods "p" is forbidden: {MISSING_GOLDEN}'
    preset = pod("p", namespace="team-a", priority=100)
    d = decide(pod_priority, review(preset), view("batch"))
    assert not d.allowed and "computed 10 from the given PriorityClass name" in d.message


# ---- both modes: Volcano PodGroups --------------------------------------------------------------


def volcano(class_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": 1, "queue": "default"}
    if class_name:
        spec["priorityClassName"] = class_name
    meta = {"name": "g", "namespace": "team-a"}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": spec}


def test_a_podgroup_takes_the_namespace_default_or_is_refused_without_it():
    out = applied(volcano(), decide(podgroup_defaults, group_review(volcano()), view("batch")))
    assert out["spec"]["priorityClassName"] == "batch"
    named = applied(volcano("gold"), decide(podgroup_defaults, group_review(volcano("gold")), view("batch")))
    assert named["spec"]["priorityClassName"] == "gold"
    d = decide(podgroup_defaults, group_review(volcano()), view("golden"))
    assert not d.allowed and d.message == MISSING_GOLDEN
    # An update keeps the stored class: the namespace's default is a CREATE's.
    update = group_review(volcano(), operation="UPDATE", old=volcano())
    assert decide(podgroup_defaults, update, view("golden")).patch == []


# ---- plugin kept: the namespace default hook ------------------------------------------------------


def after_plugin(
    named: str | None, *, fields: tuple[str, ...] = ("containers",), **preset: Any
) -> dict[str, Any]:
    """A pod as the built-in plugin leaves it: the globalDefault filled in where none was named."""
    obj = pod("p", namespace="team-a", priority_class=named or "everyday")
    spec = obj["spec"]
    spec.setdefault("priority", preset.get("priority", 1000 if named == "gold" else 100))
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    obj["metadata"]["managedFields"] = managed(*fields, *(("priorityClassName",) if named else ()))
    return obj


@pytest.mark.parametrize(
    ("default", "obj", "want"),
    [
        ("batch", after_plugin(None), ("batch", 10, "Never")),
        ("batch", after_plugin("everyday"), ("everyday", 100, "PreemptLowerPriority")),  # named: kept
        ("batch", after_plugin("gold"), ("gold", 1000, "PreemptLowerPriority")),
        (None, after_plugin(None), ("everyday", 100, "PreemptLowerPriority")),  # label newer than cache
    ],
    ids=["default-applies", "named-global-default-kept", "named-kept", "no-annotation"],
)
def test_the_kept_mode_hook_replaces_only_the_plugins_fill_in(default, obj, want):
    out = applied(obj, decide(namespace_default_class, review(obj), view(default)))
    assert resolved(out) == want


def test_the_kept_mode_hook_without_a_global_default():
    obj = pod("p", namespace="team-a", priority=0, preemption_policy="PreemptLowerPriority")
    obj["metadata"]["managedFields"] = managed("containers")
    no_default = [c for c in CLASSES if not c["globalDefault"]]
    out = applied(obj, decide(namespace_default_class, review(obj), view("gold", no_default)))
    assert (out["spec"]["priorityClassName"], out["spec"]["priority"]) == ("gold", 1000)


def test_the_kept_mode_hook_refuses_a_missing_default_and_a_preset_the_client_sent():
    d = decide(namespace_default_class, review(after_plugin(None)), view("golden"))
    assert not d.allowed and d.message == f'pods "p" is forbidden: {MISSING_GOLDEN}'
    sent = after_plugin(None, fields=("containers", "priority"), priority=100)
    d = decide(namespace_default_class, review(sent), view("batch"))
    assert not d.allowed and "the integer value of priority (100) must not be provided" in d.message
    # Only a CREATE: an update never changes a pod's class.
    update = review(after_plugin(None), operation="UPDATE", old=after_plugin(None))
    assert decide(namespace_default_class, update, view("golden")).allowed


# ---- the label hook -----------------------------------------------------------------------------


@given(
    annotation=st.sampled_from([None, "", "gold"]),
    label=st.sampled_from([None, "true", "false"]),
    others=st.booleans(),
    operation=st.sampled_from(["CREATE", "UPDATE"]),
)
def test_the_label_hook_leaves_every_namespace_in_step(annotation, label, others, operation):
    obj = namespace(default=annotation, label=label, **({"team": "a"} if others else {}))
    d = decide(namespace_default_label, review(obj, operation=operation, old=obj), make_view())
    out = applied(obj, d)
    assert not nd.label_out_of_step(out)
    assert bool(d.patch) is nd.label_out_of_step(obj)
    assert {k: v for k, v in (out["metadata"].get("labels") or {}).items() if k != KEY} == (
        {"team": "a"} if others else {}
    )


# ---- the controller's backstop --------------------------------------------------------------------


class Patches:
    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.calls: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        assert method == "PATCH" and kw["content_type"] == "application/merge-patch+json"
        self.calls.append((path, kw["body"]))
        if self.status != 200:
            raise ApiError(self.status, "x", "scripted")
        return {}


def labeller(*namespaces: dict[str, Any], status: int = 200) -> tuple[DefaultClassLabeller, Patches]:
    empty = {n: WatchCache.static(n, []) for n in ("podgroups", "pods", "quotas", "nodes", "ledgers", "pdbs")}
    caches = Caches(
        **empty,  # type: ignore[arg-type]
        classes=WatchCache.static("classes", []),
        namespaces=WatchCache.static("namespaces", [namespace_labels(n) for n in namespaces]),
    )
    client = Patches(status)
    return DefaultClassLabeller(client, caches), client  # type: ignore[arg-type]


def test_the_controller_puts_a_missing_or_stale_label_in_step():
    annotated, stale, fine = namespace("a", default="gold"), namespace("b", label="true"), namespace("c")
    lab, client = labeller(annotated, stale, fine)
    assert sorted(lab.out_of_step()) == ["a", "b"]
    assert [lab.sync(n) for n in ("a", "b", "c", "gone")] == [True, True, False, False]
    assert client.calls == [
        ("/api/v1/namespaces/a", {"metadata": {"labels": {KEY: "true"}, "resourceVersion": "7"}}),
        ("/api/v1/namespaces/b", {"metadata": {"labels": {KEY: None}, "resourceVersion": "7"}}),
    ]


@pytest.mark.parametrize("status", [404, 409])
def test_a_namespace_gone_or_changed_meanwhile_is_not_an_error(status):
    lab, _ = labeller(namespace("a", default="gold"), status=status)
    assert lab.sync("a") is False


def test_any_other_failure_is_retried():
    lab, _ = labeller(namespace("a", default="gold"), status=403)
    with pytest.raises(ApiError):
        lab.sync("a")


def native_after_plugin(named: str | None, **spec: Any) -> dict[str, Any]:
    """A native PodGroup as the built-in plugin leaves it (admitPodGroup: class and priority)."""
    obj = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "npg", "namespace": "team-a", "managedFields": managed("schedulingPolicy")},
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "priorityClassName": named or "everyday",
            "priority": 100,
        },
    }
    if named:
        obj["metadata"]["managedFields"] = managed("schedulingPolicy", "priorityClassName")
    obj["spec"].update(spec)
    return obj


def native_review(obj: dict[str, Any]) -> dict[str, Any]:
    body = review(obj)
    gvk = {"group": "scheduling.k8s.io", "version": "v1alpha2"}
    body["request"]["kind"] = {**gvk, "kind": "PodGroup"}
    body["request"]["resource"] = {**gvk, "resource": "podgroups"}
    return body


def test_the_kept_mode_native_podgroup_hook():
    obj = native_after_plugin(None)
    out = applied(obj, decide(native_rule, native_review(obj), view("batch")))
    assert (out["spec"]["priorityClassName"], out["spec"]["priority"]) == ("batch", 10)
    assert "preemptionPolicy" not in out["spec"]
    kept = native_after_plugin("everyday")
    assert decide(native_rule, native_review(kept), view("batch")).patch == []
    d = decide(native_rule, native_review(native_after_plugin(None)), view("golden"))
    assert not d.allowed
    assert d.message == f'podgroups.scheduling.k8s.io "npg" is forbidden: {MISSING_GOLDEN}'
