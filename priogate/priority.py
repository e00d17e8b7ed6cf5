"""Pod priority resolution and PriorityClass rules, with upstream Kubernetes semantics.

Pure functions over plain dicts (the JSON shape of the API objects). The rules and the texts
of denials are upstream's own (kubernetes/kubernetes plugin/pkg/admission/priority/admission.go,
pkg/apis/scheduling/validation/validation.go and pkg/apis/scheduling/helpers.go), so tools and
runbooks that grep for them keep working.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEFAULT_PRIORITY_WITHOUT_DEFAULT_CLASS = 0
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
SYSTEM_PREFIX = "system-"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# The two classes kube-apiserver bootstraps; only these may carry the system- prefix.
SYSTEM_CLASSES: dict[str, int] = {
    "system-node-critical": SYSTEM_CRITICAL_PRIORITY + 1000,
    "system-cluster-critical": SYSTEM_CRITICAL_PRIORITY,
}

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")


@dataclass(frozen=True, slots=True)
class Resolution:
    """What a pod's priority fields become after admission."""

    priority: int
    preemption_policy: str
    class_name: str  # "" when no class was named and no default exists
    defaulted: bool  # the class came from the globalDefault, not from the pod


class ClassNotFound(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no PriorityClass with name {name} was found")
        self.name = name


def class_value(pc: Mapping) -> int:
    # value is a plain int32 in scheduling/v1 (not a pointer): absent decodes as 0 on the server.
    return int(pc.get("value") or 0)


def class_policy(pc: Mapping) -> str:
    # Stored v1 classes are always defaulted (pkg/apis/scheduling/v1/defaults.go); treat a
    # missing policy the same way.
    return pc.get("preemptionPolicy") or PREEMPT_LOWER_PRIORITY


def is_global_default(pc: Mapping) -> bool:
    return pc.get("globalDefault") is True


def current_default(classes: Iterable[Mapping]) -> Mapping | None:
    """The globalDefault class with the lowest value; equal values are broken by name so every
    replica picks the same one (upstream leaves ties to cache order)."""
    best: Mapping | None = None
    for pc in classes:
        if not is_global_default(pc):
            continue
        if best is None or (class_value(pc), pc["metadata"]["name"]) < (
            class_value(best),
            best["metadata"]["name"],
        ):
            best = pc
    return best


def resolve(class_name: str | None, classes: Mapping[str, Mapping], default: Mapping | None) -> Resolution:
    """Resolve a pod's or a native PodGroup's class name to its priority and preemption policy:
    the named class, else the globalDefault, else 0 (admission.go establishPriority, which
    admitPod and admitPodGroup share).

    Raises ClassNotFound for a named class that does not exist."""
    if class_name:
        pc = classes.get(class_name)
        if pc is None:
            raise ClassNotFound(class_name)
        return Resolution(class_value(pc), class_policy(pc), class_name, defaulted=False)
    if default is not None:
        return Resolution(class_value(default), class_policy(default), default["metadata"]["name"], True)
    return Resolution(DEFAULT_PRIORITY_WITHOUT_DEFAULT_CLASS, PREEMPT_LOWER_PRIORITY, "", defaulted=False)


def preset_conflict(spec: Mapping, resolution: Resolution) -> str | None:
    """A preset spec.priority or spec.preemptionPolicy must equal the computed one (admitPod).

    Priority is checked first; when both disagree only the priority message is returned."""
    given = spec.get("priority")
    if given is not None and given != resolution.priority:
        return (
            f"the integer value of priority ({given}) must not be provided in pod spec; priority "
            f"admission controller computed {resolution.priority} from the given PriorityClass name"
        )
    policy = spec.get("preemptionPolicy")
    if policy is not None and policy != resolution.preemption_policy:
        return (
            f"the string value of PreemptionPolicy ({policy}) must not be provided in pod spec; priority "
            f"admission controller computed {resolution.preemption_policy} from the given PriorityClass name"
        )
    return None


def podgroup_priority_conflict(given: int | None, resolution: Resolution) -> str | None:
    """A native PodGroup's preset spec.priority must equal the computed one (admission.go
    admitPodGroup). PodGroups have no preemptionPolicy, so only the integer is checked."""
    if given is None or given == resolution.priority:
        return None
    return (
        f"priority set in the pod group ({given}) must match the priority computed "
        f"({resolution.priority}) based on the priority class set in the spec"
    )


# ---- PriorityClass validation (422 layer) -------------------------------------------------


def is_dns1123_subdomain(name: str) -> bool:
    # fullmatch: `$` would also accept a trailing newline.
    return len(name) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(name) is not None


def system_class_problem(pc: Mapping) -> str | None:
    """Why a system- named class does not match a built-in one exactly, or None
    (helpers.go IsKnownSystemPriorityClass)."""
    name = pc["metadata"]["name"]
    want = SYSTEM_CLASSES.get(name)
    if want is None:
        return f"{name} is not a known system priority class"
    if class_value(pc) != want:
        return f"value of {name} PriorityClass must be {want}"
    if is_global_default(pc):
        return f"globalDefault of {name} PriorityClass must be false"
    return None


def validate_preemption_policy(policy: object) -> str | None:
    if policy is None:
        return None
    if policy == "":
        return "preemptionPolicy: Required value"
    if policy not in PREEMPTION_POLICIES:
        supported = ", ".join(f'"{p}"' for p in PREEMPTION_POLICIES)
        return f'preemptionPolicy: Unsupported value: "{policy}": supported values: {supported}'
    return None


def validate_class_create(pc: Mapping) -> list[str]:
    """Field errors of a new PriorityClass, all at once, in upstream's wording (validation.go
    ValidatePriorityClass)."""
    errors: list[str] = []
    name = pc.get("metadata", {}).get("name") or ""
    if not name:
        errors.append("metadata.name: Required value: name or generateName is required")
    elif not is_dns1123_subdomain(name):
        errors.append(
            f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
            "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    value = pc.get("value", 0)
    if not isinstance(value, int) or isinstance(value, bool) or not INT32_MIN <= value <= INT32_MAX:
        errors.append(f"value: Invalid value: {value!r}: must be an int32")
    elif name.startswith(SYSTEM_PREFIX):
        problem = system_class_problem(pc)
        if problem:
            errors.append(
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for "
                f"system use only. error: {problem}"
            )
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errors.append(
            f"value: Forbidden: maximum allowed value of a user defined priority is "
            f"{HIGHEST_USER_DEFINABLE_PRIORITY}"
        )
    if "globalDefault" in pc and not isinstance(pc["globalDefault"], bool | None):
        errors.append(f"globalDefault: Invalid value: {pc['globalDefault']!r}: must be a boolean")
    policy_error = validate_preemption_policy(pc.get("preemptionPolicy"))
    if policy_error:
        errors.append(policy_error)
    return errors


def validate_class_update(old: Mapping, new: Mapping) -> list[str]:
    """value and preemptionPolicy are immutable; nothing else is re-checked (validation.go
    ValidatePriorityClassUpdate)."""
    errors: list[str] = []
    if class_value(new) != class_value(old):
        errors.append("value: Forbidden: may not be changed in an update.")
    if class_policy(new) != class_policy(old):
        errors.append(f'preemptionPolicy: Invalid value: "{class_policy(new)}": field is immutable')
    policy_error = validate_preemption_policy(new.get("preemptionPolicy"))
    if policy_error:
        errors.append(policy_error)
    return errors


def global_default_conflict(pc: Mapping, operation: str, default: Mapping | None) -> str | None:
    """Only one globalDefault may exist (admission.go validatePriorityClass). `default` is the
    current one from the cache."""
    if not is_global_default(pc) or default is None:
        return None
    if operation == "UPDATE" and default["metadata"]["name"] == pc["metadata"]["name"]:
        return None
    return (
        f"PriorityClass {default['metadata']['name']} is already marked as default. "
        "Only one default can exist"
    )


def system_class_delete_problem(name: str) -> str | None:
    if name in SYSTEM_CLASSES:
        return "this is a system priority class and cannot be deleted"
    return None
