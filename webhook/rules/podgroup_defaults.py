"""Mutating PodGroups: defaults (minMember 1, queue "default") and priorityClassName resolution.

On CREATE the class is resolved as for pods: an unknown class is refused with the pod rule's
message, and a group without one gets its namespace's default class (priogate.namespace_default)
or else the globalDefault class's name, so ResourceQuota scopes
match a group and its pods alike (upstream's admitPod writes the default class's name into a
pod's spec.priorityClassName the same way).

On UPDATE the stored class is kept, never resolved again, as upstream's Priority admission
plugin does for pods (plugin/pkg/admission/priority/admission.go resolves on CREATE only and
carries the stored value over on UPDATE). Resolving again would fail closed once the class is
deleted (every later write of the group refused: the controller's status record, finalizer
removal, namespace deletion) and would silently move a classless group into a globalDefault
created since, with a fresh quota check. Only an update that names a different class looks it
up, because that is a new claim the quota rule checks again.

A CREATE reaches this hook only when the in-process policy left it here (webhook/priority_policy.py:
a class its table lacks, a table not yet complete; marked) or when it is still incomplete (no
policy ran: a missing minMember or queue). It is resolved in full as before, and the mark
removed."""

from __future__ import annotations

from typing import Any

from priogate import podgroup, priority
from priogate.priority_table import MARKER_ANNOTATION
from webhook import class_lookup
from webhook.objects import mapping, new_object, old_object, optional_int, optional_str
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny, set_field


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.sub_resource:  # status writes are the controller's; the hook is not registered for them
        return allow()
    if request.operation not in ("CREATE", "UPDATE"):
        return allow()
    group = new_object(request)
    spec = mapping(group, "spec", "object")
    class_name = optional_str(spec, "priorityClassName", "object.spec")
    optional_str(spec, "queue", "object.spec")
    optional_int(spec, "minMember", "object.spec")
    patch: list[dict[str, Any]] = []
    if "spec" not in group:
        patch.append({"op": "add", "path": "/spec", "value": {}})
        spec = {}
    doc = {"spec": spec}
    if spec.get("minMember") is None:
        patch.append(set_field(doc, ("spec", "minMember"), podgroup.DEFAULT_MIN_MEMBER))
    if not spec.get("queue"):
        patch.append(set_field(doc, ("spec", "queue"), podgroup.DEFAULT_QUEUE))
    if request.operation == "UPDATE":
        old_spec = mapping(old_object(request), "spec", "oldObject")
        stored = optional_str(old_spec, "priorityClassName", "oldObject.spec") or ""
        if not class_name:
            if stored:  # a client that dropped the field (a replace from an old manifest) keeps it
                patch.append(set_field(doc, ("spec", "priorityClassName"), stored))
            return allow(patch)
        if class_name == stored:
            return allow(patch)
    try:
        # An UPDATE got here naming a class (a class-less one returned above), so only a CREATE
        # can take the namespace's default (priogate.namespace_default).
        resolution = class_lookup.resolve_in(class_name, request.namespace, view)
    except priority.ClassNotFound as e:
        return deny(str(e))
    if resolution.defaulted:
        patch.append(set_field(doc, ("spec", "priorityClassName"), resolution.class_name))
    return allow(patch + (class_lookup.unmark(group) if request.operation == "CREATE" else []))


RULE_SET = RuleSet(
    name="podgroup-defaults.priogate.io",
    path="/mutate/podgroups",
    kind="mutating",
    handler=admit,
    api_groups=("scheduling.volcano.sh",),
    api_versions=("v1beta1",),
    resources=("podgroups",),
    operations=("CREATE", "UPDATE"),
    needs=("priorityclasses", "namespaces"),
    # PriorityClasses change rarely, and refusing would fail every pod creation in the cluster
    # while the watch is down: a stale class list is the lesser harm (docs/reliability.md).
    answers_from_stale=True,
    server="quota",
    # A CREATE the in-process policy resolved (webhook/priority_policy.py) is complete and
    # unmarked: nothing left to do. An UPDATE is patched or checked only when a default is
    # missing (minMember, queue) or the class differs from the stored one (dropped: carried
    # over; changed: resolved). An update that keeps all three, as the controller's and most
    # clients' do, never needs a call.
    match_conditions=(
        (
            "marked-or-defaults-missing-or-class-change",
            "!has(object.spec) || !has(object.spec.minMember)"
            " || !has(object.spec.queue) || object.spec.queue == ''"
            " || (request.operation == 'CREATE' && has(object.metadata.annotations)"
            f" && '{MARKER_ANNOTATION}' in object.metadata.annotations)"
            " || (request.operation == 'UPDATE'"
            " && (has(object.spec.priorityClassName) ? object.spec.priorityClassName : '')"
            " != (has(oldObject.spec) && has(oldObject.spec.priorityClassName)"
            " ? oldObject.spec.priorityClassName : ''))",
        ),
    ),
)
