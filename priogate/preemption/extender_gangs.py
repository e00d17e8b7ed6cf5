"""The preempt extender and PodGroups: which preemptors kube-scheduler must not preempt for alone,
and which victims would break a running group (priogate/preemption/extender.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from priogate.podgroup import FINISHED_PHASES
from priogate.preemption.engine import FINISHED_GROUP, GANG_MEMBER, gang_request
from priogate.preemption.records import PodInfo
from priogate.preemption.state import ClusterState, occupies
from priogate.preemption.units import group_members


def broken_group(state: ClusterState, victims: Sequence[PodInfo]) -> str:
    """A running PodGroup these victims would leave below minMember without taking it whole."""
    taken: dict[str, int] = {}
    for pod in victims:
        if pod.group in state.groups:
            taken[pod.group] = taken.get(pod.group, 0) + 1
    for group, count in sorted(taken.items()):
        placed = [
            p
            for p in (state.pods[k] for k in group_members(state).get(group, ()))
            if occupies(p, state.nodes) and not p.terminating
        ]
        if count < len(placed) and len(placed) - count < state.groups[group].min_member:
            return group
    return ""


UNKNOWN_GROUP = "its PodGroup is not in priogate's view yet: gang preemption decides for it once it is"


def gang_member(state: ClusterState, pod: PodInfo) -> str:
    """Why kube-scheduler must not preempt for this pod alone, or "": a member of a PodGroup
    still short of minMember is placed by gang preemption, all needed members at once (the
    controller's; engine.decide_pod leaves it to the gang in the same words), and a member of
    a finished group preempts for nobody. kube-scheduler would preempt for each member on its
    own, and could take victims for a gang that still cannot run."""
    if not pod.group:
        return ""
    group = state.groups.get(pod.group)
    if group is None:
        # kube-scheduler tries a pod the moment it is created, often before the controller's
        # watch shows its group: preempting for it alone then is the race this rule prevents.
        # The pod is retried; a group that never comes leaves only its own pod waiting.
        return UNKNOWN_GROUP
    if group.phase in FINISHED_PHASES:
        return FINISHED_GROUP
    # The preemptor as kube-scheduler tries it: pending and without scheduling gates (it never
    # tries a gated pod), whatever the watch shows yet. The watch may not show the pod at all,
    # or still show the gate priogate lifted a moment ago; either way the group would look
    # complete without it, and kube-scheduler would preempt for one member alone.
    members = [state.pods[k] for k in group_members(state).get(pod.group, ()) if k != pod.key]
    request = gang_request(group, [*members, dataclasses.replace(pod, gated=False)])
    if request is not None and any(p.key == pod.key for p in request.pending):
        return GANG_MEMBER
    return ""
