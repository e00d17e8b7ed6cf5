"""A namespace's pods as the enqueue view reads them: each PodGroup's members, and the requests
of the bound ones summed by priority. Read from the pods cache's snapshot of the namespace
(replaced by a new object on every change) and moved by what changed since the last one read:
a pod whose object is the one seen then is not read again, so a pod's change costs the pods that
changed plus a dictionary copy, not a walk over every pod of the namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from priogate import enqueue
from priogate.podgroup import TERMINAL_POD_PHASES, group_of
from priogate.resources import ResourceList, pod_requests
from priogate.running_sums import add_into

Pod = Mapping[str, Any]


def priority_of(pod: Pod) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def requests_of(pod: Pod) -> ResourceList:
    try:
        return pod_requests(pod)
    except ValueError:
        return {}  # admission refuses such pods; an old one must not stop every reconcile


def bound_active(pod: Pod) -> bool:
    return (
        bool((pod.get("spec") or {}).get("nodeName"))
        and (pod.get("status") or {}).get("phase") not in TERMINAL_POD_PHASES
    )


def version(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(uid, resourceVersion): an object's content is the same while both are."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return uid, str(meta.get("resourceVersion") or "")


@dataclass(frozen=True)
class _Pod:
    obj: Pod
    group: str  # its PodGroup's name, "" if none
    uid: str
    version: str
    bound: enqueue.BoundPod | None  # None: not bound, or finished


def _read(pod: Pod, last: _Pod | None) -> _Pod:
    uid, pod_version = version(pod)
    if last is not None and last.uid == uid and last.version == pod_version and pod_version:
        held = last.bound  # the same content delivered again
    else:
        held = enqueue.BoundPod(priority_of(pod), requests_of(pod)) if bound_active(pod) else None
    return _Pod(pod, group_of(pod), uid, pod_version, held)


@dataclass(frozen=True)
class NamespacePods:
    seen: Mapping[str, Pod]  # the snapshot read
    pods: dict[str, _Pod]  # by name, in the snapshot's order
    members: dict[str, list[Pod]]  # by PodGroup name, in the snapshot's order
    per_priority: dict[int, dict[str, int | Fraction]]  # bound pods' requests by priority

    @property
    def bound(self) -> list[enqueue.BoundPod]:
        return [pod.bound for pod in self.pods.values() if pod.bound is not None]

    @classmethod
    def read(cls, seen: Mapping[str, Pod], last: NamespacePods | None) -> NamespacePods:
        if last is not None and last.seen is seen:
            return last
        if last is not None:
            moved = last._moved(seen)
            if moved is not None:
                return moved
        pods = {
            name: _read(pod, last.pods.get(name) if last is not None else None) for name, pod in seen.items()
        }
        members: dict[str, list[Pod]] = {}
        per_priority: dict[int, dict[str, int | Fraction]] = {}
        for pod in pods.values():
            if pod.group:
                members.setdefault(pod.group, []).append(pod.obj)
            if pod.bound is not None:
                add_into(per_priority.setdefault(pod.bound.priority, {}), pod.bound.requests_nanos)
        return cls(seen, pods, members, per_priority)

    def _moved(self, seen: Mapping[str, Pod]) -> NamespacePods | None:
        """This one moved to `seen` by the pods that differ; None when many do, or when a pod
        changed group or was replaced under its name (a new uid: its place in the order moved):
        a full read is then as cheap, and simpler."""
        old = self.seen
        changed = [name for name, pod in seen.items() if old.get(name) is not pod]
        removed = old.keys() - seen.keys()
        if len(changed) + len(removed) > max(64, len(seen) // 8):
            return None
        # The cache keeps a name's place and appends new names; a relist may reorder them all.
        kept = list(old) if not removed else [name for name in old if name not in removed]
        if list(seen) != kept + [name for name in changed if name not in old]:
            return None
        pods = dict(self.pods)
        members = dict(self.members)
        per_priority = {priority: dict(sums) for priority, sums in self.per_priority.items()}
        copied: set[str] = set()  # groups whose member list is a new one already

        def member_list(group: str) -> list[Pod]:
            if group not in copied:
                members[group] = list(members.get(group, ()))
                copied.add(group)
            return members[group]

        def hold(pod: _Pod, sign: int) -> None:
            if pod.bound is not None:
                add_into(per_priority.setdefault(pod.bound.priority, {}), pod.bound.requests_nanos, sign)

        for name in removed:
            pod = pods.pop(name)
            hold(pod, -1)
            if pod.group:
                listed = member_list(pod.group)
                del listed[next(i for i, p in enumerate(listed) if p is pod.obj)]
        for name in changed:
            before = pods.get(name)
            pod = _read(seen[name], before)
            if before is not None and (before.uid != pod.uid or before.group != pod.group):
                return None
            if before is not None:
                hold(before, -1)
                if pod.group:
                    listed = member_list(pod.group)
                    listed[next(i for i, p in enumerate(listed) if p is before.obj)] = pod.obj
            elif pod.group:  # new: last in the snapshot's order, so last among its group's too
                member_list(pod.group).append(pod.obj)
            hold(pod, 1)
            pods[name] = pod
        for group in [g for g in copied if not members[g]]:
            del members[group]
        return NamespacePods(seen, pods, members, per_priority)
