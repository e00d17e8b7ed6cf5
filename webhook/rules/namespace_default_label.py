"""Mutating Namespaces: the routing label follows the default-class annotation.

A namespace annotated `priogate.io/default-priority-class` must carry the label of the same key
("true"), because with the built-in Priority plugin kept kube-apiserver sends its pods to
priogate by that label (webhook/rules/namespace_default_class.py, a namespaceSelector: a
namespaceSelector reads labels only, and a matchCondition on every pod would cost every pod
create a conversion of the whole object, k8s.io/apiserver pkg/admission/plugin/cel/
activation.go). This hook sets the label in the same write that sets the annotation, and
removes it with the annotation, so the two cannot disagree in storage while it is registered.
The controller puts a missing or stale label in step as a backstop (controller/
namespace_default.py): namespaces annotated before priogate was installed, or while this hook
was not registered.

The matchCondition calls the hook only for a write whose label disagrees with its annotation:
namespaces are written rarely, and most writes (kube-controller-manager's, the finalizers') never
reach it. For a Namespace request kube-apiserver matches the namespaceSelector against the object
itself, so the system namespaces are exempt as everywhere.
"""

from __future__ import annotations

from typing import Any

from priogate import namespace_default
from priogate.namespace_default import ANNOTATION, LABEL, LABEL_VALUE
from webhook.objects import mapping, new_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, escape_pointer


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.sub_resource or request.operation not in ("CREATE", "UPDATE"):
        return allow()
    namespace = new_object(request)
    meta = mapping(namespace, "metadata", "object")
    labels = mapping(meta, "labels", "object.metadata")
    mapping(meta, "annotations", "object.metadata")
    if not namespace_default.label_out_of_step(namespace):
        return allow()
    wanted = namespace_default.wanted_label(namespace)
    patch: list[dict[str, Any]]
    if wanted is None:
        patch = [{"op": "remove", "path": "/metadata/labels/" + escape_pointer(LABEL)}]
    elif "labels" not in meta:
        patch = [{"op": "add", "path": "/metadata/labels", "value": {LABEL: wanted}}]
    else:
        op = "replace" if LABEL in labels else "add"
        patch = [{"op": op, "path": "/metadata/labels/" + escape_pointer(LABEL), "value": wanted}]
    return allow(patch)


# namespace_default.label_out_of_step, in CEL: the annotation's (non-empty) presence against the
# label's value. Must hold for every write the handler patches, and for no other.
_OUT_OF_STEP = (
    f"object.metadata.?annotations[?'{ANNOTATION}'].orValue('') != ''"
    f" ? object.metadata.?labels[?'{LABEL}'].orValue('') != '{LABEL_VALUE}'"
    f" : object.metadata.?labels[?'{LABEL}'].hasValue()"
)

RULE_SET = RuleSet(
    name="namespace-default-label.priogate.io",
    path="/mutate/namespaces",
    kind="mutating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("namespaces",),
    operations=("CREATE", "UPDATE"),
    # It reads nothing but the request.
    answers_from_stale=True,
    match_conditions=(("label-out-of-step", _OUT_OF_STEP),),
)
