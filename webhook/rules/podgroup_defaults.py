"""Mutating PodGroups: defaults (minMember 1, queue "default") and priorityClassName resolution.

The class is resolved as for pods: an unknown class is refused with the pod rule's message, and
a group without one gets the globalDefault class's name, so ResourceQuota scopes match a group
and its pods alike (upstream's admitPod writes the default class's name into a pod's
spec.priorityClassName the same way)."""

from __future__ import annotations

from typing import Any

from priogate import podgroup, priority
from webhook.objects import mapping, new_object, optional_int, optional_str
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny, set_field


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation not in ("CREATE", "UPDATE"):
        return allow()
    group = new_object(request)
    spec = mapping(group, "spec", "object")
    class_name = optional_str(spec, "priorityClassName", "object.spec")
    optional_str(spec, "queue", "object.spec")
    optional_int(spec, "minMember", "object.spec")
    try:
        resolution = priority.resolve(class_name, view.priority_classes(), view.default_priority_class())
    except priority.ClassNotFound as e:
        return deny(str(e))
    patch: list[dict[str, Any]] = []
    if "spec" not in group:
        patch.append({"op": "add", "path": "/spec", "value": {}})
        spec = {}
    doc = {"spec": spec}
    if spec.get("minMember") is None:
        patch.append(set_field(doc, ("spec", "minMember"), podgroup.DEFAULT_MIN_MEMBER))
    if not spec.get("queue"):
        patch.append(set_field(doc, ("spec", "queue"), podgroup.DEFAULT_QUEUE))
    if resolution.defaulted:
        patch.append(set_field(doc, ("spec", "priorityClassName"), resolution.class_name))
    return allow(patch)


RULE_SET = RuleSet(
    name="podgroup-defaults.priogate.io",
    path="/mutate/podgroups",
    kind="mutating",
    handler=admit,
    api_groups=("scheduling.volcano.sh",),
    api_versions=("v1beta1",),
    resources=("podgroups",),
    operations=("CREATE", "UPDATE"),
    needs=("priorityclasses",),
    # PriorityClasses change rarely, and refusing would fail every pod creation in the cluster
    # while the watch is down: a stale class list is the lesser harm (README, Reliability).
    answers_from_stale=True,
    server="quota",
)
