"""Validating PriorityClasses: names, the value ceiling, one globalDefault, immutability, and the
two system classes that cannot be deleted, as kubernetes/kubernetes does them
(pkg/apis/scheduling/validation, plugin/pkg/admission/priority/admission.go and
pkg/registry/scheduling/priorityclass/storage).

The annotation `priogate.io/allowed-namespaces` (who may use the class,
webhook/class_access_policy.py) must hold a label selector kubectl would parse
(priogate/label_selector.py); otherwise the write is refused as a field error.

Safe deletes (docs/priorityclass-policy.md): a DELETE of a class that live pod templates or
PodGroups still name is refused, naming up to five of them and their count, unless the class is
annotated `priogate.io/force-delete: "true"` (priogate/class_users.py). The check LISTs those
kinds when a delete arrives, within the request's deadline; when it cannot finish, the delete is
refused with "retry" (503), never admitted unchecked. A new globalDefault is admitted with a
warning counting the namespaces whose future class-less pods it changes.

Field errors are 422 in upstream's "is invalid" envelope; the globalDefault and delete refusals
are 403 as upstream's. One deliberate tightening: upstream guards only a single DELETE of a
system class (storage.go REST.Delete), while a deletecollection removes them. Here every DELETE
of a system class is refused, which closes that gap, because admission sees each item of a
deletecollection.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from priogate import class_users, label_selector, priority
from priogate.kube.class_users import ListingFailed
from priogate.priority_table import ALLOWED_NAMESPACES_ANNOTATION
from priogate.text import escape_untrusted
from webhook.objects import (
    MalformedObject,
    mapping,
    new_object,
    object_name,
    old_object,
    optional_int,
    optional_str,
)
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny

GROUP_RESOURCE = "priorityclasses.scheduling.k8s.io"
# Listing must end this long before kube-apiserver stops waiting, so the refusal arrives: a late
# answer would meet the hook's failurePolicy, which is Ignore with the plugin kept.
ANSWER_MARGIN_SECONDS = 1.0
# Without a ?timeout= from the caller: the hook's own timeoutSeconds, less the margin.
DEFAULT_LIST_SECONDS = 9.0
# Counting namespaces only words a warning: it must not hold up the write for long.
COUNT_SECONDS = 2.0


def _invalid(name: str, errors: list[str]) -> Decision:
    detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return deny(f'PriorityClass.scheduling.k8s.io "{name}" is invalid: {detail}', code=422)


def _forbidden(name: str, message: str) -> Decision:
    return deny(f'{GROUP_RESOURCE} "{name}" is forbidden: {message}')


def _checked_class(obj: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    meta = mapping(obj, "metadata", where)
    if not isinstance(meta.get("name"), str):
        raise MalformedObject(f"{where}.metadata.name must be a string")
    optional_int(obj, "value", where)
    optional_str(obj, "preemptionPolicy", where)
    optional_str(obj, "description", where)
    if not isinstance(obj.get("globalDefault"), bool | None):
        raise MalformedObject(f"{where}.globalDefault must be a boolean")
    return obj


def _annotation_errors(pc: Mapping[str, Any]) -> list[str]:
    annotations = mapping(mapping(pc, "metadata", "object"), "annotations", "object.metadata")
    selector = annotations.get(ALLOWED_NAMESPACES_ANNOTATION)
    if selector is None:
        return []
    field = f"metadata.annotations[{ALLOWED_NAMESPACES_ANNOTATION}]"
    if not isinstance(selector, str):
        return [f"{field}: Invalid value: {selector!r}: must be a string"]
    try:
        label_selector.parse(selector)
    except label_selector.SelectorError as e:
        return [f'{field}: Invalid value: "{selector}": not a label selector: {e}']
    return []


def _deadline(request: AdmissionRequest) -> float:
    """When LISTs made for this request must end (time.monotonic())."""
    now = time.monotonic()
    if request.deadline is None:
        return now + DEFAULT_LIST_SECONDS
    return min(request.deadline - ANSWER_MARGIN_SECONDS, now + DEFAULT_LIST_SECONDS)


def _count(view: ClusterView, deadline: float) -> class_users.NamespaceCount | None:
    try:
        return class_users.count_namespaces(view.namespaces(min(deadline, time.monotonic() + COUNT_SECONDS)))
    except ListingFailed:
        return None


def _warnings(pc: Mapping[str, Any], operation: str, view: ClusterView, deadline: float) -> list[str]:
    warnings = []
    if priority.is_global_default(pc):
        current = view.default_priority_class()
        if current is None or current["metadata"]["name"] != pc["metadata"]["name"]:
            warnings.append(class_users.new_default_warning(priority.class_value(pc), _count(view, deadline)))
    if (
        operation == "UPDATE"
        and pc["metadata"]["name"] in priority.SYSTEM_CLASSES
        and priority.is_global_default(pc)
    ):
        warnings.append("a system class as globalDefault gives every class-less pod system-critical priority")
    return warnings


def _admit_delete(request: AdmissionRequest, name: str, view: ClusterView) -> Decision:
    warnings = []
    default = view.default_priority_class()
    if default is not None and default["metadata"]["name"] == name:
        warnings.append("the globalDefault class is deleted: class-less pods will get priority 0")
    # kube-apiserver sends the stored object as oldObject on DELETE; the cache stands in for a
    # caller that does not.
    stored = request.old_object if request.old_object is not None else view.priority_classes().get(name)
    if class_users.forced(stored):
        warnings.append(
            f"{class_users.FORCE_DELETE_ANNOTATION}: deleted without checking which workloads and"
            " PodGroups still name it; their next pods are refused until they name another class"
        )
        return allow(warnings=warnings)
    try:
        uses = view.class_uses(name, _deadline(request))
    except ListingFailed as e:
        # Not a verdict on the class (a retry may pass), so 503 and not 403, as a ledger that
        # cannot be written is answered (webhook/ledger_refusal.py). Never admitted unchecked.
        return deny(
            f'{GROUP_RESOURCE} "{escape_untrusted(name)}" could not be deleted:'
            f" {class_users.unchecked_message(str(e))}",
            code=503,
            reason="ServiceUnavailable",
        )
    if uses:
        return _forbidden(name, class_users.in_use_message(uses))
    return allow(warnings=warnings)


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation == "DELETE":
        name = request.name or object_name(request.old_object or {}, "oldObject")
        problem = priority.system_class_delete_problem(name)
        if problem:
            return _forbidden(name, problem)
        return _admit_delete(request, name, view)

    pc = _checked_class(new_object(request), "object")
    name = pc["metadata"]["name"]
    if request.operation == "CREATE":
        errors = priority.validate_class_create(pc)
    elif request.operation == "UPDATE":
        errors = priority.validate_class_update(_checked_class(old_object(request), "oldObject"), pc)
    else:
        return allow()
    errors += _annotation_errors(pc)
    if errors:
        return _invalid(name, errors)
    conflict = priority.global_default_conflict(pc, request.operation, view.default_priority_class())
    if conflict:
        return _forbidden(name, conflict)
    return allow(warnings=_warnings(pc, request.operation, view, _deadline(request)))


RULE_SET = RuleSet(
    name="priorityclasses.priogate.io",
    path="/validate/priorityclasses",
    kind="validating",
    handler=admit,
    api_groups=("scheduling.k8s.io",),
    api_versions=("v1",),
    resources=("priorityclasses",),
    operations=("CREATE", "UPDATE", "DELETE"),
    # A DELETE lists workloads and PodGroups cluster-wide (webhook/view.py class_uses): room for
    # a large cluster's pages, still well inside kube-apiserver's 30 s maximum.
    timeout_seconds=10,
    needs=("priorityclasses",),
    # PriorityClasses change rarely, and refusing would fail every pod creation in the cluster
    # while the watch is down: a stale class list is the lesser harm (docs/reliability.md).
    answers_from_stale=True,
    builtin_fallback=True,
)
