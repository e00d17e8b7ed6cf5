"""Validating pod and Volcano PodGroup dry-run CREATEs: a preview of the preemption placing the
object would take, as an AdmissionReview warning (`kubectl create --dry-run=server` prints it as
`Warning: priogate: preview: ...`). It never refuses and never patches.

The decision is the preemption engine's (priogate.preemption.engine.decide_pod / decide_group:
the step `simulate` takes for that preemptor, and the one the controller's preemptors take live)
on the cluster this server's watch caches show, with the object added as the pending preemptor
it would become (priogate.preemption_preview.pending). No API call is made per request.

kube-apiserver calls it only for dry runs (the matchCondition on `request.dryRun`), and a real
create never reaches it. The condition is not free: kube-apiserver converts the object for CEL
before evaluating it, for every pod create the hook's rules match (k8s.io/apiserver
pkg/admission/plugin/cel/activation.go newActivation), which is why the hook is registered only
where an admin turns the preview on (webhook.policy; docs/priorityclass-policy.md).
"""

from __future__ import annotations

import datetime as dt

import structlog

from priogate import podgroup
from priogate.clock import rfc3339
from priogate.preemption_preview import pending, warning
from webhook.objects import MalformedObject, new_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow

log = structlog.get_logger("priogate.preview")

KINDS = {"Pod": "pod", "PodGroup": "PodGroup"}
VOLCANO_GROUP, VOLCANO_VERSION = podgroup.GROUP_VERSION.split("/")


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    kind = request.kind.get("kind", "")
    # The matchCondition sends dry runs only; a real create that reaches this hook anyway (a
    # configuration edited by hand) pays nothing more than the answer.
    if not request.dry_run or request.operation != "CREATE" or request.sub_resource or kind not in KINDS:
        return allow()
    if kind == "PodGroup" and request.kind.get("group") != VOLCANO_GROUP:
        return allow()
    try:
        obj = pending(new_object(request), kind, request.namespace, rfc3339(_now()))
        outcome = view.preemption_preview(kind, obj)
    except (MalformedObject, ValueError, KeyError, TypeError) as e:
        log.info("no preview", kind=kind, namespace=request.namespace, reason=str(e))
        return allow()
    if outcome is None:
        return allow()
    text = warning(outcome, KINDS[kind])
    return allow(warnings=[text] if text else None)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def preview_rule_set(name: str, path: str, group: str, version: str, resource: str) -> RuleSet:
    """The preview hook for one resource. Pods and PodGroups get a hook each, so each hook's rules
    match its own resource only (a rule lists groups and resources as a cross product)."""
    return RuleSet(
        name=name,
        path=path,
        kind="validating",
        handler=admit,
        api_groups=(group,),
        api_versions=(version,),
        resources=(resource,),
        operations=("CREATE",),
        side_effects="None",
        # A preview must never hold a create up for long: kube-apiserver gives up after this
        # and, the hook being advisory (failurePolicy Ignore), admits the dry run unwarned.
        timeout_seconds=2,
        needs=("nodes", "preemption-pods", "podgroups", "pdbs", "priorityclasses"),
        answers_from_stale=True,
        advisory=True,
        match_conditions=(("dry-run-only", "request.dryRun == true"),),
        server="preview",
    )


RULE_SET = preview_rule_set(
    "preemption-preview.priogate.io", "/validate/preemption-preview", "", "v1", "pods"
)
