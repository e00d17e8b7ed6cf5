"""A default PriorityClass per namespace (docs/priorityclass-policy.md, "A default per namespace").

A namespace annotated ANNOTATION: NAME gives its pods and PodGroups that name no class the class
NAME (its value and preemptionPolicy) instead of the cluster's globalDefault. Upstream has no
such rule (kubernetes/kubernetes#60018, #93416: "an admission webhook could be used"); its
Priority plugin resolves a class-less object to the globalDefault (plugin/pkg/admission/priority/
admission.go establishPriority). A NAME with no PriorityClass refuses the create, as a named
class that does not exist is refused.

With the built-in plugin kept, kube-apiserver sends pods to priogate only in namespaces that
carry LABEL (a webhook's namespaceSelector: a pod elsewhere costs no call and no CEL, which
matchConditions would; they convert the whole object first, k8s.io/apiserver pkg/admission/
plugin/cel/activation.go). The label mirrors the annotation, set by a hook on Namespace writes
and put back by the controller where it went missing.

Pure functions over plain dicts; the webhook and the controller do the I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from priogate import priority

# One name for the idea: the annotation carries the class, the label of the same key routes.
ANNOTATION = "priogate.io/default-priority-class"
LABEL = ANNOTATION
LABEL_VALUE = "true"


class DefaultClassNotFound(priority.ClassNotFound):
    """The namespace's default class does not exist. The message keeps upstream's words for a
    missing class and names the namespace and the annotation that chose it."""

    def __init__(self, name: str, namespace: str) -> None:
        LookupError.__init__(
            self,
            f"no PriorityClass with name {name} was found: it is the default of namespace "
            f"{namespace} (annotation {ANNOTATION})",
        )
        self.name = name
        self.namespace = namespace


def default_class(namespace: Mapping[str, Any] | None) -> str | None:
    """The namespace's default class name, or None (no annotation, or an empty one: upstream
    treats an empty priorityClassName as none given, and so does this)."""
    if not namespace:
        return None
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION)
    return value if isinstance(value, str) and value else None


def routed(namespace: Mapping[str, Any]) -> bool:
    """Whether the namespace carries the routing label."""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL) == LABEL_VALUE


def wanted_label(namespace: Mapping[str, Any]) -> str | None:
    """The label's value the namespace should carry: LABEL_VALUE exactly where the annotation is
    set (even to a missing class: its pods must reach the hook to be refused), None elsewhere."""
    return LABEL_VALUE if default_class(namespace) is not None else None


def label_out_of_step(namespace: Mapping[str, Any]) -> bool:
    """Whether the routing label disagrees with the annotation: a label missing where the
    annotation is (pods would not be routed), or a label left where it is not (each pod would
    pay a call for nothing)."""
    labels = (namespace.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL) != wanted_label(namespace)


def label_merge_patch(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch (RFC 7386: null removes) that puts the label in step, guarded by the
    namespace's resourceVersion so it cannot undo a newer annotation change (409 instead)."""
    meta: dict[str, Any] = {"labels": {LABEL: wanted_label(namespace)}}
    version = (namespace.get("metadata") or {}).get("resourceVersion")
    if version:
        meta["resourceVersion"] = version
    return {"metadata": meta}


def client_set_spec_fields(obj: Mapping[str, Any]) -> set[str]:
    """The top-level spec fields some field manager owns, from metadata.managedFields.

    kube-apiserver computes managedFields before admission (k8s.io/apiserver pkg/endpoints/
    handlers/create.go: FieldManager.UpdateNoErrors precedes the mutating admission chain), from
    the object as the client sent it: on CREATE every field the client set, and only those, is
    owned by its manager ("f:spec": {"f:priorityClassName": {}}). The Priority plugin's fill-in
    comes after and is owned by nobody. So a priorityClassName nobody owns was not sent."""
    owned: set[str] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if not isinstance(entry, Mapping):
            continue
        fields = entry.get("fieldsV1")
        spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
        if isinstance(spec, Mapping):
            owned |= {key[2:] for key in spec if isinstance(key, str) and key.startswith("f:")}
    return owned


def filled_by_plugin(obj: Mapping[str, Any], global_default: Mapping | None) -> bool:
    """With the built-in plugin kept: whether the object's class was the plugin's fill-in (so the
    namespace's default replaces it) rather than the client's choice (kept).

    No class at all: the plugin found no globalDefault; nothing was chosen. The globalDefault's
    name, owned by no field manager: the plugin wrote it (client_set_spec_fields). Any other
    class, or the globalDefault's name that a manager owns: the client named it. The check asks
    both (the name and the ownership) so that an object whose managedFields are missing (the
    field manager's failure leaves them empty, UpdateNoErrors) keeps every class but the
    globalDefault's; a client that forges managedFields to claim the field without sending it
    keeps the globalDefault, which it could have named anyway."""
    spec = obj.get("spec") or {}
    name = spec.get("priorityClassName") or ""
    if not name:
        return True
    if global_default is None or name != global_default["metadata"]["name"]:
        return False
    return "priorityClassName" not in client_set_spec_fields(obj)
