"""Validating pods: only the controller lifts priogate's scheduling gate (priogate.gate).

kube-apiserver lets anyone who may update a pod remove a scheduling gate (ValidatePodUpdate only
forbids adding one), and the built-in `edit` role may update pods: a tenant could release a
member of a waiting group and let a partial gang hold nodes. So an update that removes the gate
is refused unless it comes from the controller's identity, the one that writes preemption
records (webhook.rules.podgroup_annotations). Called only for such updates (its
matchCondition), so no other pod update pays a call, and only in enrolled namespaces, the only
ones where priogate gates pods (webhook.rules.pod_gate), so no other pod update pays the
condition's evaluation either.
"""

from __future__ import annotations

from priogate import gate
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from webhook.objects import new_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow
from webhook.rules.podgroup_annotations import controller_only

NAME = "pod-gate-guard.priogate.io"


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation != "UPDATE" or not request.old_object:
        return allow()
    if not gate.dropped(request.old_object, new_object(request)):
        return allow()
    return controller_only(
        request,
        f"the scheduling gate {gate.GATE} is lifted",
        "it holds the pod until its PodGroup is Inqueue (kubectl priogate why pod/NAME says what the "
        "group waits for)",
    )


_GATED = "{}.spec.schedulingGates.exists(g, g.name == '" + gate.GATE + "')"

RULE_SET = RuleSet(
    name=NAME,
    path="/validate/pod-gate",
    kind="validating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("pods",),
    operations=("UPDATE",),
    server="quota",
    namespace_labels=((ENROLLED_LABEL, "In", (ENROLLED_VALUE,)),),
    match_conditions=(
        (
            "lifts-the-gate",
            f"has(oldObject.spec.schedulingGates) && {_GATED.format('oldObject')}"
            f" && !(has(object.spec.schedulingGates) && {_GATED.format('object')})",
        ),
    ),
)
