"""Mutating pods: resolve spec.priorityClassName to spec.priority and spec.preemptionPolicy.

Upstream's Priority admission plugin, rule for rule (kubernetes/kubernetes
plugin/pkg/admission/priority/admission.go admitPod): CREATE resolves (named class, else the
namespace's default class where its namespace names one, priogate.namespace_default, else the
globalDefault, else 0) and refuses disagreeing preset values; UPDATE only carries the old
integer and policy over when the new object lacks them; subresources are ignored. Equal preset
values pass, so the patch is idempotent under reinvocation and agrees with the built-in plugin
when a cluster keeps both.
"""

from __future__ import annotations

from typing import Any

from priogate import priority
from priogate.priority_table import MARKER_ANNOTATION
from webhook import class_lookup
from webhook.objects import mapping, new_object, object_name, old_object, optional_int, optional_str
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny, set_field


def _admit_create(request: AdmissionRequest, view: ClusterView) -> Decision:
    pod = new_object(request)
    spec = mapping(pod, "spec", "object")
    class_name = optional_str(spec, "priorityClassName", "object.spec")
    optional_int(spec, "priority", "object.spec")
    optional_str(spec, "preemptionPolicy", "object.spec")
    try:
        resolution = class_lookup.resolve_in(class_name, request.namespace, view)
    except priority.ClassNotFound as e:
        return _forbidden(pod, str(e))
    conflict = priority.preset_conflict(spec, resolution)
    if conflict:
        return _forbidden(pod, conflict)
    patch: list[dict[str, Any]] = []
    if "spec" not in pod:
        patch.append({"op": "add", "path": "/spec", "value": {}})
        spec = {}
    if spec.get("priority") != resolution.priority:
        patch.append(_set(spec, "priority", resolution.priority))
    if spec.get("preemptionPolicy") != resolution.preemption_policy:
        patch.append(_set(spec, "preemptionPolicy", resolution.preemption_policy))
    if resolution.defaulted:
        patch.append(_set(spec, "priorityClassName", resolution.class_name))
    return allow(patch + class_lookup.unmark(pod))


def _forbidden(pod: Any, message: str) -> Decision:
    # Upstream's envelope; for a generateName pod the name is still empty at admission time.
    return deny(f'pods "{object_name(pod)}" is forbidden: {message}')


def _set(spec: Any, key: str, value: Any) -> dict[str, Any]:
    return set_field({"spec": spec}, ("spec", key), value)


def _admit_update(request: AdmissionRequest) -> Decision:
    # Preserve, never recompute (as admitPod on UPDATE); the class may have changed since the pod was created.
    spec = mapping(new_object(request), "spec", "object")
    old_spec = mapping(old_object(request), "spec", "oldObject")
    patch = [
        _set(spec, key, old_spec[key])
        for key in ("priority", "preemptionPolicy")
        if spec.get(key) is None and old_spec.get(key) is not None
    ]
    return allow(patch + class_lookup.unmark(new_object(request)))


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.sub_resource:
        return allow()
    if request.operation == "CREATE":
        return _admit_create(request, view)
    if request.operation == "UPDATE":
        return _admit_update(request)
    return allow()


RULE_SET = RuleSet(
    name="pod-priority.priogate.io",
    path="/mutate/pods",
    kind="mutating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("pods",),
    operations=("CREATE", "UPDATE"),
    needs=("priorityclasses", "namespaces"),
    # PriorityClasses change rarely, and refusing would fail every pod creation in the cluster
    # while the watch is down: a stale class list is the lesser harm (docs/reliability.md).
    answers_from_stale=True,
    builtin_fallback=True,
    # The Priority plugin resolves and checks before any mutating webhook is called (it precedes
    # MutatingAdmissionWebhook in kube-apiserver's plugin order, pkg/kubeapiserver/options/
    # plugins.go AllOrderedPlugins) and is re-run after a webhook mutates a pod. With it kept,
    # this hook finds the values already resolved and returns no patch; its only other outcome
    # would be a refusal from a cache that lags the plugin's. tests/e2e/test_differential.py
    # shows the plugin alone gives every acceptance case's outcome.
    builtin_equivalent=True,
    # A CREATE the in-process policy resolved (webhook/priority_policy.py: no preset value, a
    # class its table holds) carries both fields and no mark: nothing left to do. It marks every
    # other CREATE. An UPDATE is only patched when the new object lacks priority or
    # preemptionPolicy (carried over from the old one, _admit_update); metadata updates (labels,
    # finalizers, owner references) are most pod writes after creation, and carry both.
    match_conditions=(
        (
            "marked-or-priority-missing",
            "!has(object.spec.priority) || !has(object.spec.preemptionPolicy)"
            f" || (has(object.metadata.annotations) && '{MARKER_ANNOTATION}' in object.metadata.annotations)",
        ),
    ),
)
