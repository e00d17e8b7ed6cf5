"""Mutating native PodGroups (scheduling.k8s.io/v1alpha2): resolve spec.priorityClassName to
spec.priority.

Upstream's Priority admission plugin, rule for rule (kubernetes/kubernetes
plugin/pkg/admission/priority/admission.go admitPodGroup, v1.36): on CREATE the class is
resolved as for a pod (establishPriority: the named class, else the globalDefault, else 0; with
priogate, the namespace's default class before the globalDefault, priogate.namespace_default), an
unknown class is refused, a preset spec.priority that differs from the computed one is refused,
and the computed priority and class name are written. Unlike pods, a PodGroup has no
preemptionPolicy, and nothing is done on UPDATE: spec.priority and spec.priorityClassName are
immutable, which the API server's own validation enforces after admission (+k8s:immutable on
PodGroupSpec, k8s.io/api scheduling/v1alpha2 types.go). Subresources are ignored.

Classes with the system- prefix resolve like any other (upstream has no namespace rule for
them any more); their values exceed the PodGroup's +k8s:maximum of 1000000000 for
spec.priority, so the API server's validation refuses such a group after admission, with or
without priogate (the differential test shows it).

Upstream only does this with the WorkloadAwarePreemption feature gate on (without it the API
server drops both fields). This hook cannot see the gates: register it only where they are on,
as the local control plane does (docs/native-podgroups.md).
"""

from __future__ import annotations

from typing import Any

from priogate import priority
from webhook import class_lookup
from webhook.objects import mapping, new_object, optional_int, optional_str
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny, set_field

RESOURCE = "podgroups.scheduling.k8s.io"


def forbidden_name(request: AdmissionRequest, obj: Any) -> str:
    """The name upstream's admission.NewForbidden puts in its message (k8s.io/apiserver
    pkg/admission/errors.go extractResourceName): the request's name, else the object's name,
    else its generateName, else "Unknown"."""
    if request.name:
        return request.name
    meta = mapping(obj, "metadata", "object")
    return (
        optional_str(meta, "name", "object.metadata")
        or optional_str(meta, "generateName", "object.metadata")
        or "Unknown"
    )


def _admit_create(request: AdmissionRequest, view: ClusterView) -> Decision:
    group = new_object(request)
    spec = mapping(group, "spec", "object")
    class_name = optional_str(spec, "priorityClassName", "object.spec")
    given = optional_int(spec, "priority", "object.spec")
    name = forbidden_name(request, group)
    try:
        resolution = class_lookup.resolve_in(class_name, request.namespace, view)
    except priority.ClassNotFound as e:
        return deny(f'{RESOURCE} "{name}" is forbidden: {e}')
    conflict = priority.podgroup_priority_conflict(given, resolution)
    if conflict:
        return deny(f'{RESOURCE} "{name}" is forbidden: {conflict}')
    patch: list[dict[str, Any]] = []
    if "spec" not in group:
        patch.append({"op": "add", "path": "/spec", "value": {}})
        spec = {}
    doc = {"spec": spec}
    if given != resolution.priority:
        patch.append(set_field(doc, ("spec", "priority"), resolution.priority))
    # pg.Spec.PriorityClassName = priorityClassName: the default's name when none was given; ""
    # (the field left out) when there is no default either.
    if resolution.defaulted:
        patch.append(set_field(doc, ("spec", "priorityClassName"), resolution.class_name))
    return allow(patch)


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    # Admit: "Ignore all calls to subresources"; podGroupResource is handled on Create only.
    if request.sub_resource or request.operation != "CREATE":
        return allow()
    return _admit_create(request, view)


RULE_SET = RuleSet(
    name="native-podgroup-priority.priogate.io",
    path="/mutate/native-podgroups",
    kind="mutating",
    handler=admit,
    api_groups=("scheduling.k8s.io",),
    api_versions=("v1alpha2",),
    resources=("podgroups",),
    # Upstream does nothing on UPDATE (the fields are immutable), so no update is ever sent.
    operations=("CREATE",),
    needs=("priorityclasses", "namespaces"),
    # As for pods (webhook/rules/pod_priority.py): a stale class list is the lesser harm.
    answers_from_stale=True,
    builtin_fallback=True,
    # The Priority plugin resolves PodGroups before any mutating webhook is called (it precedes
    # MutatingAdmissionWebhook in kube-apiserver's plugin order, pkg/kubeapiserver/options/
    # plugins.go AllOrderedPlugins). With it kept this hook could only agree: webhook/policy.py
    # leaves it unregistered then. tests/e2e/test_differential.py shows the plugin alone gives
    # every native PodGroup case's outcome.
    builtin_equivalent=True,
)
