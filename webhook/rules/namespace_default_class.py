"""Mutating pods, with the built-in Priority plugin kept: the namespace's default class replaces
the globalDefault the plugin filled in (priogate.namespace_default).

The plugin runs before every mutating webhook (kube-apiserver's plugin order, pkg/kubeapiserver/
options/plugins.go) and writes a class-less pod the globalDefault's name, value and policy
(plugin/pkg/admission/priority/admission.go admitPod). In a namespace annotated
`priogate.io/default-priority-class`, this hook replaces the three with the namespace's class.
Because it changes the pod, kube-apiserver runs the in-tree plugins again (reinvocation,
k8s.io/apiserver pkg/admission/reinvocation.go), and the plugin then checks the new values as it
checks any named class with preset values: they agree, so the pod is admitted with them.

Whether the pod named a class: a class other than the globalDefault's was named; the
globalDefault's own name was named only if the client sent it, which metadata.managedFields
records before admission runs (namespace_default.filled_by_plugin). So a pod that names the
globalDefault explicitly keeps it. A priority or preemptionPolicy the client itself set must
agree with the namespace's class, as upstream requires of a preset value (admitPod), or the
pod is refused in upstream's words; the plugin's own fill-in is replaced.

kube-apiserver calls this hook only for pod CREATEs in namespaces labelled
`priogate.io/default-priority-class: "true"` (the label follows the annotation,
webhook/rules/namespace_default_label.py): a pod elsewhere costs no call and no CEL. With the
plugin replaced it is not registered: the pod priority hook and its in-process policy resolve the
namespace's default themselves. Its failure policy is the quota hooks' (Fail): the plugin's
globalDefault is no fallback for a class the admin chose, and a pod admitted with it would keep
it for life.
"""

from __future__ import annotations

from typing import Any

from priogate import namespace_default, priority
from webhook import class_lookup
from webhook.objects import mapping, new_object, object_name, optional_str
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny, set_field


def replace_fill_in(request: AdmissionRequest, view: ClusterView, forbidden: str, *, pod: bool) -> Decision:
    """The patch that puts the namespace's default in place of the plugin's fill-in, for a pod
    (`pod`: with its preemptionPolicy) or a native PodGroup (no such field); `forbidden` is the
    start of a refusal in upstream's envelope (`pods "p" is forbidden`)."""
    if request.sub_resource or request.operation != "CREATE":
        return allow()
    obj = new_object(request)
    spec = mapping(obj, "spec", "object")
    optional_str(spec, "priorityClassName", "object.spec")
    default = view.namespace_default_class(request.namespace)
    # No default in the cache: the label is stale, or the annotation is newer than the watch.
    if not default or not namespace_default.filled_by_plugin(obj, view.default_priority_class()):
        return allow()
    try:
        resolution = class_lookup.resolve_in(None, request.namespace, view)
    except priority.ClassNotFound as e:
        return deny(f"{forbidden}: {e}")
    # A value the client itself sent must agree with the class, as upstream requires of a preset
    # value (admitPod, admitPodGroup); the plugin's own fill-in is replaced.
    sent = namespace_default.client_set_spec_fields(obj)
    preset = {k: spec[k] for k in ("priority", "preemptionPolicy") if k in sent and k in spec}
    conflict = (
        priority.preset_conflict(preset, resolution)
        if pod
        else priority.podgroup_priority_conflict(preset.get("priority"), resolution)
    )
    if conflict:
        return deny(f"{forbidden}: {conflict}")
    wanted: list[tuple[str, Any]] = [
        ("priorityClassName", resolution.class_name),
        ("priority", resolution.priority),
    ]
    if pod:
        wanted.append(("preemptionPolicy", resolution.preemption_policy))
    doc = {"spec": spec}
    return allow([set_field(doc, ("spec", key), value) for key, value in wanted if spec.get(key) != value])


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    name = object_name(request.object) if isinstance(request.object, dict) else ""
    return replace_fill_in(request, view, f'pods "{name}" is forbidden', pod=True)


RULE_SET = RuleSet(
    name="namespace-default-class.priogate.io",
    path="/mutate/namespace-default-pods",
    kind="mutating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("pods",),
    # A pod's class is fixed at creation (admitPod resolves on CREATE only).
    operations=("CREATE",),
    needs=("priorityclasses", "namespaces"),
    # As the pod priority hook: a stale class list is the lesser harm (docs/reliability.md).
    answers_from_stale=True,
    builtin_companion=True,
    namespace_labels=((namespace_default.LABEL, "In", (namespace_default.LABEL_VALUE,)),),
)
