"""The PriorityClass table kube-apiserver resolves pod priorities from, in process.

With the built-in Priority plugin replaced, a webhook round trip on every pod create costs more
than the plugin does (docs/benchmarks.md, bench-pod-create). So a MutatingAdmissionPolicy
(`admissionregistration.k8s.io/v1`, KEP-3962, GA in Kubernetes 1.36; webhook/priority_policy.py)
resolves the common pod in kube-apiserver itself: no class or a known class, no preset
`priority` or `preemptionPolicy`. Its parameter is this table, a ConfigMap the controller keeps
equal to its PriorityClass cache (controller/priority_table.py). Every other pod (an unknown
class, a preset value, a table not yet complete) is marked with MARKER_ANNOTATION and left to the
pod priority hook, which resolves it as before and removes the mark. A second policy does the
same for the common PodGroup's defaults and class, in either mode, and leaves the rest, marked,
to the PodGroup defaults hook.

The table lags the classes by the controller's watch and one write, as upstream's plugin lags
them by its informer: a class created a moment ago is not in it yet (its pods go to the hook,
which reads the class once more before calling it missing), and one deleted a moment ago still
is (its pods resolve to the deleted class's value, as the plugin's would from its lister).

Keys: `class.<name>` = "<value> <preemptionPolicy>" (a class name is a DNS subdomain, so
always a valid ConfigMap key), `globalDefault` = the default class's name, `complete` = "true"
once written from a synced cache. The prefix keeps a class named "complete" apart.

Who may use a class (ALLOWED_NAMESPACES_ANNOTATION) is kept in a second ConfigMap,
CLASS_ACCESS_NAME, which exists only while some class carries the annotation: the in-process
class access policy (webhook/class_access_policy.py) takes it as its parameter, and kube-apiserver
skips a policy whose parameter is missing before it evaluates anything, so a cluster without a
restricted class pays nothing for the rule. Keys: `allowed.<name>` = the selector in the compact
form CEL reads (priogate.label_selector.encode_text), `selector.<name>` = the annotation as
written, for the refusal's message (docs/priorityclass-policy.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from priogate import label_selector, priority

TABLE_NAME = "priogate-priority-classes"
CLASS_PREFIX = "class."
DEFAULT_KEY = "globalDefault"
COMPLETE_KEY = "complete"
# Set by the policy on a pod it leaves to the pod priority hook; the hook removes it. A tenant
# who sets it only sends their pod to the hook, which resolves it in full.
MARKER_ANNOTATION = "priogate.io/priority-unresolved"
# On a PriorityClass: a label selector (kubectl syntax); only namespaces it matches may use it.
ALLOWED_NAMESPACES_ANNOTATION = "priogate.io/allowed-namespaces"
CLASS_ACCESS_NAME = "priogate-class-access"
ALLOWED_PREFIX = "allowed."
SELECTOR_PREFIX = "selector."


def allowed_namespaces(pc: Mapping) -> str | None:
    """The class's selector text, or None without the annotation (the class is usable anywhere)."""
    annotations = (pc.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ALLOWED_NAMESPACES_ANNOTATION)
    return value if isinstance(value, str) else None


def table_data(classes: Iterable[Mapping]) -> dict[str, str]:
    """The table's ConfigMap data for these PriorityClasses: each class's value and policy, the
    globalDefault the plugin would pick (priority.current_default), and the completeness mark."""
    listed = list(classes)
    data = {
        CLASS_PREFIX + pc["metadata"]["name"]: f"{priority.class_value(pc)} {priority.class_policy(pc)}"
        for pc in listed
    }
    default = priority.current_default(listed)
    if default is not None:
        data[DEFAULT_KEY] = default["metadata"]["name"]
    data[COMPLETE_KEY] = "true"
    return data


def table_object(namespace: str, data: Mapping[str, str] | None = None) -> dict:
    """The table's ConfigMap; without data, the placeholder an install ships (nothing complete:
    the policy leaves every pod to the hook until the controller writes the table)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": TABLE_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "priogate"},
        },
        "data": dict(data or {}),
    }


def class_access_data(classes: Iterable[Mapping]) -> dict[str, str]:
    """CLASS_ACCESS_NAME's data: each annotated class's selector, compact and as written; empty
    when no class is annotated (then the ConfigMap is deleted, not written)."""
    data: dict[str, str] = {}
    for pc in classes:
        selector = allowed_namespaces(pc)
        if selector is not None:
            name = pc["metadata"]["name"]
            data[ALLOWED_PREFIX + name] = label_selector.encode_text(selector)
            data[SELECTOR_PREFIX + name] = selector
    return data


def class_access_object(namespace: str, data: Mapping[str, str]) -> dict:
    return {
        **table_object(namespace, data),
        "metadata": {**table_object(namespace)["metadata"], "name": CLASS_ACCESS_NAME},
    }
