"""Mutating pods: a member of a PodGroup that is not admitted yet is created with priogate's
scheduling gate (priogate.gate), so it takes no node until its group is Inqueue.

Called only in namespaces priogate has enrolled (priogate.scope: every namespace that holds or
held a PodGroup claiming a pod or a resource), and there only for pods that name a PodGroup (the
matchCondition: Volcano's annotation or the scheduler-plugins label). The namespaceSelector comes
first because a matchCondition is not free: kube-apiserver converts the whole pod to unstructured
to evaluate one (k8s.io/apiserver pkg/admission/plugin/cel/activation.go, newActivation), about a
millisecond of its mutating step per create (docs/benchmarks.md), while a namespace selector reads
one label from its informer. So pods in a namespace without PodGroups pay nothing; the price is
that a member created before its namespace's first PodGroup is not gated (docs/controller.md).
The group's phase comes from
the watch cache: a cache behind the group's admission gates a member the controller then
releases at once (its pod event brings the group to the controller), which is the safe side;
a cache behind a group's creation gates the member as the group's own absence would.
"""

from __future__ import annotations

from priogate import gate
from priogate.podgroup import GROUP_ANNOTATION, GROUP_LABEL, group_of
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
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
    namespace_labels=((ENROLLED_LABEL, "In", (ENROLLED_VALUE,)),),
    match_conditions=(
        (
            "names-a-podgroup",
            f"(has(object.metadata.annotations) && '{GROUP_ANNOTATION}' in object.metadata.annotations)"
            f" || (has(object.metadata.labels) && '{GROUP_LABEL}' in object.metadata.labels)",
        ),
    ),
)
