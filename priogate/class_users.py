"""Who still names a PriorityClass: the safe-delete rule and the globalDefault warning of the
PriorityClass hook (webhook/rules/priorityclasses.py, docs/priorityclass-policy.md).

Deleting a class does not touch pods that already run with it: their `spec.priority` was
resolved at creation and is immutable. What breaks is every *next* pod of a workload whose
template still names it: upstream's Priority plugin (and priogate in its place) refuses a pod
whose class does not exist ("no PriorityClass with name ... was found",
plugin/pkg/admission/priority/admission.go). So a delete is refused while a live pod template or
PodGroup names the class, unless the class carries FORCE_DELETE_ANNOTATION.

Pure: the listing itself is priogate/kube/class_users.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from priogate.text import escape_untrusted

FORCE_DELETE_ANNOTATION = "priogate.io/force-delete"
# A namespace's own default class (issue 33, "A default per namespace"): class-less pods there do
# not get the globalDefault, so a new globalDefault does not change them.
NAMESPACE_DEFAULT_ANNOTATION = "priogate.io/default-priority-class"
MAX_NAMED = 5

_POD_TEMPLATE_CLASS = ("spec", "template", "spec", "priorityClassName")
_PODGROUP_CLASS = ("spec", "priorityClassName")


@dataclass(frozen=True)
class Kind:
    """A kind whose objects may name a class, where its API is served and where the name sits."""

    label: str  # as the refusal names it
    group_version: str
    plural: str
    class_path: tuple[str, ...]


# The workload kinds of k8s.io/api whose pod template's spec is a PodSpec (apps/v1, batch/v1;
# a CronJob's template is one level further down, in its jobTemplate), then the PodGroups whose
# spec names a class: Volcano's schema (scheduling.volcano.sh/v1beta1) and the native one
# (scheduling.k8s.io/v1alpha2, docs/native-podgroups.md; upstream resolves its class in
# admitPodGroup).
KINDS: tuple[Kind, ...] = (
    Kind("Deployment", "apps/v1", "deployments", _POD_TEMPLATE_CLASS),
    Kind("StatefulSet", "apps/v1", "statefulsets", _POD_TEMPLATE_CLASS),
    Kind("DaemonSet", "apps/v1", "daemonsets", _POD_TEMPLATE_CLASS),
    Kind("ReplicaSet", "apps/v1", "replicasets", _POD_TEMPLATE_CLASS),
    Kind("Job", "batch/v1", "jobs", _POD_TEMPLATE_CLASS),
    Kind("CronJob", "batch/v1", "cronjobs", ("spec", "jobTemplate", *_POD_TEMPLATE_CLASS)),
    Kind("PodGroup.scheduling.volcano.sh", "scheduling.volcano.sh/v1beta1", "podgroups", _PODGROUP_CLASS),
    Kind("PodGroup.scheduling.k8s.io", "scheduling.k8s.io/v1alpha2", "podgroups", _PODGROUP_CLASS),
)


@dataclass(frozen=True, order=True)
class Use:
    """One live object naming the class. `owner` is the uid of its controller (a ReplicaSet's
    Deployment, a Job's CronJob), "" without one."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    owner: str = ""

    def shown(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f'{self.kind} "{escape_untrusted(where)}"'


def _dig(obj: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def class_named(kind: Kind, obj: Mapping[str, Any]) -> str | None:
    """The class `obj`'s template (or spec) names; None when it names none or is malformed."""
    name = _dig(obj, kind.class_path)
    return name if isinstance(name, str) and name else None


def _finished(obj: Mapping[str, Any]) -> bool:
    """A Job whose Complete or Failed condition is True: the job controller creates no pod for it
    again (pkg/controller/job/job_controller.go, IsJobFinished), so its template names nothing
    that a delete could break."""
    conditions = _dig(obj, ("status", "conditions"))
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in conditions
    )


def is_live(kind: Kind, obj: Mapping[str, Any]) -> bool:
    """Not being deleted (no deletionTimestamp; the garbage collector or a finalizer is taking it
    away), and for a Job, not finished."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or meta.get("deletionTimestamp"):
        return False
    return not (kind.plural == "jobs" and _finished(obj))


def _controller_uid(meta: Mapping[str, Any]) -> str:
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return ""
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller") is True and isinstance(ref.get("uid"), str):
            return str(ref["uid"])
    return ""


def uses_of(kind: Kind, objects: Iterable[Any], class_name: str) -> list[Use]:
    """The live objects of `kind` among `objects` (one page of a LIST) that name `class_name`."""
    found = []
    for obj in objects:
        if not isinstance(obj, Mapping) or class_named(kind, obj) != class_name or not is_live(kind, obj):
            continue
        meta = obj["metadata"]
        name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
        found.append(
            Use(
                kind.label,
                namespace if isinstance(namespace, str) else "",
                name if isinstance(name, str) else "",
                uid if isinstance(uid, str) else "",
                _controller_uid(meta),
            )
        )
    return found


def _terminating(ns: Any) -> bool:
    meta = ns.get("metadata") if isinstance(ns, Mapping) else None
    if not isinstance(meta, Mapping):
        return False
    return bool(meta.get("deletionTimestamp")) or _dig(ns, ("status", "phase")) == "Terminating"


def terminating_namespaces(namespaces: Iterable[Any]) -> frozenset[str]:
    """The namespaces being deleted: the namespace controller deletes everything in them, and
    NamespaceLifecycle admits no new pod there, so what they hold names a class for nothing."""
    return frozenset(
        ns["metadata"]["name"]
        for ns in namespaces
        if _terminating(ns) and isinstance(ns["metadata"].get("name"), str)
    )


def collapse(uses: Iterable[Use], terminating: frozenset[str] = frozenset()) -> list[Use]:
    """`uses` without those in a `terminating` namespace, and without those whose controller is
    itself listed (the ReplicaSets of a Deployment that names the class, the Jobs of such a
    CronJob): the admin changes the owner, and the owner is what the refusal should name. An
    owned object whose owner names another class stays: a rollback, or a retry of that Job,
    would still need this class. Sorted, for a stable message."""
    uses = [u for u in uses if u.namespace not in terminating]
    listed = {u.uid for u in uses if u.uid}
    return sorted(u for u in uses if not (u.owner and u.owner in listed))


def forced(pc: Mapping[str, Any] | None) -> bool:
    """Whether the class carries `priogate.io/force-delete: "true"` (exactly that string, as
    Kubernetes' own boolean annotations take it)."""
    annotations = _dig(pc, ("metadata", "annotations"))
    return isinstance(annotations, Mapping) and annotations.get(FORCE_DELETE_ANNOTATION) == "true"


def force_hint() -> str:
    return f'annotate the class {FORCE_DELETE_ANNOTATION}="true" to delete it anyway'


def in_use_message(uses: Sequence[Use]) -> str:
    """Why the delete is refused: up to MAX_NAMED of `uses` by kind, namespace and name, and how
    many there are."""
    shown = ", ".join(u.shown() for u in uses[:MAX_NAMED])
    more = f" and {len(uses) - MAX_NAMED} more" if len(uses) > MAX_NAMED else ""
    noun = "object" if len(uses) == 1 else "objects"
    return (
        f"it is still named by {len(uses)} live {noun}: {shown}{more}; their next pods would be"
        f" refused once the class is gone. Change or delete them first, or {force_hint()}"
    )


def unchecked_message(reason: str) -> str:
    """Why the delete is refused when the objects naming the class could not all be listed."""
    return (
        f"could not check which workloads and PodGroups still name it ({escape_untrusted(reason)});"
        f" retry, or {force_hint()}"
    )


@dataclass(frozen=True)
class NamespaceCount:
    changed: int  # live namespaces whose class-less pods get the globalDefault
    own_default: int  # live namespaces with a default of their own


def count_namespaces(namespaces: Iterable[Any]) -> NamespaceCount:
    """How many namespaces a new globalDefault reaches: those not being deleted (a terminating
    namespace admits no new pod: NamespaceLifecycle), less those whose annotation
    NAMESPACE_DEFAULT_ANNOTATION gives their class-less pods another class."""
    changed = own = 0
    for ns in namespaces:
        meta = ns.get("metadata") if isinstance(ns, Mapping) else None
        if not isinstance(meta, Mapping) or _terminating(ns):
            continue
        annotations = meta.get("annotations")
        default = annotations.get(NAMESPACE_DEFAULT_ANNOTATION) if isinstance(annotations, Mapping) else None
        if isinstance(default, str) and default:
            own += 1
        else:
            changed += 1
    return NamespaceCount(changed, own)


def new_default_warning(value: int, count: NamespaceCount | None) -> str:
    """The warning for a class that becomes the globalDefault; `count` None: not counted."""
    if count is None:
        where = "in every namespace (they could not be counted just now)"
    else:
        noun = "namespace" if count.changed == 1 else "namespaces"
        where = f"in {count.changed} {noun}"
        if count.own_default:
            where += f" (not in {count.own_default} more with their own {NAMESPACE_DEFAULT_ANNOTATION})"
    return (
        f"pods created without a priorityClassName {where} will now get priority {value} from this"
        " class; existing pods keep theirs"
    )
