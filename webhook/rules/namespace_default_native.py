"""Mutating native PodGroups (scheduling.k8s.io/v1alpha2), with the built-in Priority plugin
kept: the namespace's default class replaces the globalDefault the plugin filled in, as for pods
(webhook/rules/namespace_default_class.py, whose rule this is; upstream's admitPodGroup resolves
a class-less group to the globalDefault exactly as admitPod does). A PodGroup has no
preemptionPolicy; its spec.priority and spec.priorityClassName are immutable after CREATE.

Called only for CREATEs in namespaces labelled `priogate.io/default-priority-class: "true"`; with
the plugin replaced it is not registered (the native PodGroup priority hook resolves the
namespace's default itself).
"""

from __future__ import annotations

from priogate import namespace_default
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision
from webhook.rules.namespace_default_class import replace_fill_in
from webhook.rules.native_podgroup_priority import RESOURCE, forbidden_name


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    name = forbidden_name(request, request.object or {})
    return replace_fill_in(request, view, f'{RESOURCE} "{name}" is forbidden', pod=False)


RULE_SET = RuleSet(
    name="namespace-default-native-podgroup.priogate.io",
    path="/mutate/namespace-default-native-podgroups",
    kind="mutating",
    handler=admit,
    api_groups=("scheduling.k8s.io",),
    api_versions=("v1alpha2",),
    resources=("podgroups",),
    operations=("CREATE",),
    needs=("priorityclasses", "namespaces"),
    answers_from_stale=True,
    builtin_companion=True,
    namespace_labels=((namespace_default.LABEL, "In", (namespace_default.LABEL_VALUE,)),),
)
