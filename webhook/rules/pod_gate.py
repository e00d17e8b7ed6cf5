"""Mutating pods: a member of a PodGroup that is not admitted yet is created with priogate's
scheduling gate (priogate.gate), so it takes no node until its group is Inqueue.

Called only for pods that name a PodGroup (the matchCondition: Volcano's annotation or the
scheduler-plugins label), so pods outside any group pay nothing. The group's phase comes from
the watch cache: a cache behind the group's admission gates a member the controller then
releases at once (its pod event brings the group to the controller), which is the safe side;
a cache behind a group's creation gates the member as the group's own absence would.
"""

from __future__ import annotations

from priogate import gate
from priogate.podgroup import GROUP_ANNOTATION, GROUP_LABEL, group_of
from webhook.objects import new_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow

NAME = "pod-gate.priogate.io"


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation != "CREATE":
        return allow()
    pod = new_object(request)
    name = group_of(pod)
    if not name:
        return allow()
    group = view.podgroup(request.namespace, name)
    phase = None if group is None else str((group.get("status") or {}).get("phase") or "")
    if not gate.needs_gate(pod, phase):
        return allow()
    return allow(patch=gate.gate_patch(pod))


RULE_SET = RuleSet(
    name=NAME,
    path="/mutate/pod-gate",
    kind="mutating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("pods",),
    operations=("CREATE",),
    needs=("podgroups",),
    server="quota",
    match_conditions=(
        (
            "names-a-podgroup",
            f"(has(object.metadata.annotations) && '{GROUP_ANNOTATION}' in object.metadata.annotations)"
            f" || (has(object.metadata.labels) && '{GROUP_LABEL}' in object.metadata.labels)",
        ),
    ),
)
