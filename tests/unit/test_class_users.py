"""Table tests for priogate/class_users.py: which objects name a PriorityClass, what counts as
live, the refusal's five names and count, the force annotation, and the namespace count of the
globalDefault warning."""

from __future__ import annotations

from typing import Any

import pytest

from priogate import class_users as cu
from tests.builders import podgroup, priority_class, workload

KIND = {k.label: k for k in cu.KINDS}
VOLCANO = KIND["PodGroup.scheduling.volcano.sh"]
NATIVE = KIND["PodGroup.scheduling.k8s.io"]


def native_group(name: str, priority_class: str | None, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default", **meta},
        "spec": spec,
    }


def test_every_kind_of_the_interface_is_listed():
    assert [(k.label, k.group_version, k.plural) for k in cu.KINDS] == [
        ("Deployment", "apps/v1", "deployments"),
        ("StatefulSet", "apps/v1", "statefulsets"),
        ("DaemonSet", "apps/v1", "daemonsets"),
        ("ReplicaSet", "apps/v1", "replicasets"),
        ("Job", "batch/v1", "jobs"),
        ("CronJob", "batch/v1", "cronjobs"),
        ("PodGroup.scheduling.volcano.sh", "scheduling.volcano.sh/v1beta1", "podgroups"),
        ("PodGroup.scheduling.k8s.io", "scheduling.k8s.io/v1alpha2", "podgroups"),
    ]


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"])
def test_a_workloads_template_names_its_class(kind):
    assert cu.class_named(KIND[kind], workload(kind, "w", priority_class="gold")) == "gold"
    assert cu.class_named(KIND[kind], workload(kind, "w")) is None


def test_a_cronjobs_class_is_in_its_job_template():
    cron = workload("CronJob", "c", priority_class="gold")
    # Read where a Job's would be, a CronJob names nothing: the nesting is what matters.
    assert cu.class_named(KIND["Job"], cron) is None
    assert cu.class_named(KIND["CronJob"], workload("Job", "j", priority_class="gold")) is None
    assert cu.class_named(KIND["CronJob"], cron) == "gold"


def test_podgroups_name_their_class_in_spec():
    assert cu.class_named(VOLCANO, podgroup("g", priority_class="gold")) == "gold"
    assert cu.class_named(VOLCANO, podgroup("g")) is None
    assert cu.class_named(NATIVE, native_group("n", "gold")) == "gold"
    assert cu.class_named(NATIVE, native_group("n", None)) is None


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"spec": None},
        {"spec": []},
        {"spec": {"template": "x"}},
        {"spec": {"template": {"spec": {"priorityClassName": 7}}}},
        {"spec": {"template": {"spec": {"priorityClassName": ""}}}},
    ],
)
def test_malformed_objects_name_nothing(obj):
    assert cu.class_named(KIND["Deployment"], obj) is None


@pytest.mark.parametrize(
    ("kind", "obj", "live"),
    [
        ("Deployment", workload("Deployment", "d", priority_class="gold"), True),
        ("Deployment", workload("Deployment", "d", priority_class="gold", deleting=True), False),
        ("Job", workload("Job", "j", priority_class="gold"), True),
        ("Job", workload("Job", "j", priority_class="gold", finished="Complete"), False),
        ("Job", workload("Job", "j", priority_class="gold", finished="Failed"), False),
        # Conditions that come before the terminal ones (KEP-3998) do not finish it.
        ("Job", workload("Job", "j", priority_class="gold", finished="SuccessCriteriaMet"), True),
        ("CronJob", workload("CronJob", "c", priority_class="gold", finished="Complete"), True),
        ("PodGroup.scheduling.volcano.sh", podgroup("g", priority_class="gold"), True),
        (
            "PodGroup.scheduling.k8s.io",
            native_group("n", "gold", deletionTimestamp="2026-01-01T00:00:00Z"),
            False,
        ),
        ("Deployment", {"spec": {}}, False),
    ],
)
def test_live(kind, obj, live):
    assert cu.is_live(KIND[kind], obj) is live


def test_uses_of_keeps_live_objects_naming_the_class():
    objects = [
        workload("Deployment", "a", namespace="team-a", priority_class="gold", uid="1"),
        workload("Deployment", "b", namespace="team-a", priority_class="silver"),
        workload("Deployment", "c", namespace="team-b", priority_class="gold", deleting=True),
        workload("Deployment", "d", namespace="team-b"),
        "not an object",
        {"metadata": "nor this", "spec": {"template": {"spec": {"priorityClassName": "gold"}}}},
    ]
    assert cu.uses_of(KIND["Deployment"], objects, "gold") == [cu.Use("Deployment", "team-a", "a", "1")]


def test_owned_objects_are_named_by_their_owner_only():
    uses = [
        cu.Use("Deployment", "ns", "web", uid="d1"),
        cu.Use("ReplicaSet", "ns", "web-5f", uid="r1", owner="d1"),
        cu.Use("CronJob", "ns", "nightly", uid="c1"),
        cu.Use("Job", "ns", "nightly-1", uid="j1", owner="c1"),
        # Its Deployment moved to another class: a rollback would still need this one.
        cu.Use("ReplicaSet", "ns", "old-7c", uid="r2", owner="d-elsewhere"),
    ]
    assert [u.name for u in cu.collapse(uses)] == ["nightly", "web", "old-7c"]


def test_owner_references_are_read_from_the_listing():
    rs = workload("ReplicaSet", "web-5f", priority_class="gold", uid="r1", controller_uid="d1")
    dep = workload("Deployment", "web", priority_class="gold", uid="d1")
    uses = cu.uses_of(KIND["ReplicaSet"], [rs], "gold") + cu.uses_of(KIND["Deployment"], [dep], "gold")
    assert uses[0].owner == "d1"
    assert [u.kind for u in cu.collapse(uses)] == ["Deployment"]


@pytest.mark.parametrize(
    ("count", "named", "more"),
    [(1, 1, ""), (5, 5, ""), (6, 5, " and 1 more"), (12, 5, " and 7 more")],
)
def test_the_refusal_names_five_and_counts_all(count, named, more):
    uses = cu.collapse(cu.Use("Deployment", "ns", f"d{i:02d}", uid=str(i)) for i in range(count))
    message = cu.in_use_message(uses)
    noun = "object" if count == 1 else "objects"
    assert message.startswith(f"it is still named by {count} live {noun}: ")
    assert message.count('Deployment "ns/d') == named
    assert f'Deployment "ns/d{named - 1:02d}"{more};' in message
    assert 'annotate the class priogate.io/force-delete="true" to delete it anyway' in message


def test_names_in_the_refusal_are_quoted_and_escaped():
    use = cu.Use("PodGroup.scheduling.volcano.sh", "ns", 'evil"\x1b[2J\nname')
    assert use.shown() == 'PodGroup.scheduling.volcano.sh "ns/evil"\\x1b[2J\\nname"'
    assert "\x1b" not in cu.in_use_message([use]) and "\n" not in cu.in_use_message([use])
    assert "\x1b" not in cu.unchecked_message("boom \x1b[31m")


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        (None, False),
        ({}, False),
        ({cu.FORCE_DELETE_ANNOTATION: "true"}, True),
        ({cu.FORCE_DELETE_ANNOTATION: "True"}, False),
        ({cu.FORCE_DELETE_ANNOTATION: "yes"}, False),
        ({cu.FORCE_DELETE_ANNOTATION: ""}, False),
        ({"other": "true"}, False),
    ],
)
def test_force_annotation(annotations, want):
    pc = priority_class("gold", value=10)
    if annotations is not None:
        pc["metadata"]["annotations"] = annotations
    assert cu.forced(pc) is want


@pytest.mark.parametrize("pc", [None, {}, {"metadata": None}, {"metadata": {"annotations": ["x"]}}])
def test_force_annotation_of_malformed_classes(pc):
    assert cu.forced(pc) is False


def namespace(name: str, default: str | None = None, *, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if default is not None:
        meta["annotations"] = {cu.NAMESPACE_DEFAULT_ANNOTATION: default}
    ns: dict[str, Any] = {"metadata": meta, "status": {"phase": "Active"}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        ns["status"]["phase"] = "Terminating"
    return ns


@pytest.mark.parametrize(
    ("namespaces", "want"),
    [
        ([], cu.NamespaceCount(0, 0)),
        ([namespace("a"), namespace("b")], cu.NamespaceCount(2, 0)),
        ([namespace("a"), namespace("b", "silver")], cu.NamespaceCount(1, 1)),
        ([namespace("a", "")], cu.NamespaceCount(1, 0)),  # an empty annotation names no class
        ([namespace("a"), namespace("gone", terminating=True)], cu.NamespaceCount(1, 0)),
        (
            [namespace("a"), {"metadata": {"name": "x"}, "status": {"phase": "Terminating"}}],
            cu.NamespaceCount(1, 0),
        ),
        ([namespace("a"), "junk", {"metadata": 3}], cu.NamespaceCount(1, 0)),
    ],
)
def test_count_namespaces(namespaces, want):
    assert cu.count_namespaces(namespaces) == want


@pytest.mark.parametrize(
    ("count", "fragment"),
    [
        (cu.NamespaceCount(1, 0), "without a priorityClassName in 1 namespace will now get priority 7 "),
        (cu.NamespaceCount(3, 0), "in 3 namespaces will now"),
        (
            cu.NamespaceCount(3, 2),
            "in 3 namespaces (not in 2 more with their own priogate.io/default-priority-class)",
        ),
        (None, "in every namespace (they could not be counted just now) will now get priority 7"),
    ],
)
def test_new_default_warning(count, fragment):
    warning = cu.new_default_warning(7, count)
    assert fragment in warning
    assert warning.endswith("existing pods keep theirs")


def test_terminating_namespaces():
    namespaces = [
        namespace("a"),
        namespace("gone", terminating=True),
        {"metadata": {"name": "going"}, "status": {"phase": "Terminating"}},
        {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}},  # no name: nothing to match
        "junk",
    ]
    assert cu.terminating_namespaces(namespaces) == {"gone", "going"}


def test_uses_in_terminating_namespaces_are_dropped():
    uses = [cu.Use("Deployment", "gone", "a", uid="1"), cu.Use("Deployment", "kept", "b", uid="2")]
    assert cu.collapse(uses, frozenset({"gone"})) == [uses[1]]
