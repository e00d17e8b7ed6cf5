"""Validating ResourceQuotas: every change to a quota's spec is written into its namespace's
ledger, as a quota fence (priogate.ledger.fences), before kube-apiserver may store
it. PodGroup decisions count the ledger's live fences besides their cached quotas, so a quota
created or lowered before a PodGroup request arrived limits it, with no read of the quotas per
admission (webhook.rules.podgroup_quota).

It never refuses a quota for what it says: only when the ledger cannot be written in time,
with "retry" (429 or 503), because a change that skipped the ledger could be missed by an
admission that follows it. Dry-run requests write nothing (side effects NoneOnDryRun), and
kube-apiserver calls the hook only for creates and spec changes (its matchCondition): status
updates (kube-controller-manager's, through the status subresource) and metadata-only updates
change no limit. Called in every namespace but the exempt ones, enrolled or not: a namespace
may be enrolled between a quota change and the next PodGroup, and quota changes are rare.

Each write also drops the expired fences; no others, since a replica whose cache is behind may
still need them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from priogate.ledger import fences
from priogate.ledger.fences import QuotaFence, fence_of
from priogate.ledger.model import stamp
from webhook.ledger_refusal import ledger_refusal
from webhook.objects import MalformedObject, new_object, old_object
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow

NAME = "resourcequota-fence.priogate.io"


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation not in ("CREATE", "UPDATE") or request.dry_run:
        return allow()
    quota = new_object(request)
    old = old_object(request) if request.operation == "UPDATE" else None
    if not isinstance(quota.get("spec") or {}, Mapping):
        raise MalformedObject("object.spec must be an object")
    now = dt.datetime.now(dt.UTC)
    fence = fence_of(quota, old, stamp(now))
    try:
        # What the ledger could not read back would damage it (kube-apiserver validated a real
        # quota already; this refuses a forged one).
        QuotaFence.from_json(fence.to_json())
    except (TypeError, ValueError) as e:
        raise MalformedObject(f"object is not a ResourceQuota priogate can record: {e}") from None
    namespace = request.namespace

    try:
        view.ledger_store.update(
            namespace,
            lambda ledger, reads: fences.decide(ledger, reads, _now, fence),
            deadline=request.deadline,
        )
    except Exception as e:
        refusal = ledger_refusal(f"ResourceQuota {fence.quota}", e)
        if refusal is None:
            raise
        return refusal
    return allow()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


RULE_SET = RuleSet(
    name=NAME,
    path="/validate/resourcequotas",
    kind="validating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("resourcequotas",),
    operations=("CREATE", "UPDATE"),
    side_effects="NoneOnDryRun",
    timeout_seconds=10,
    needs=(),  # it reads no cache
    # A spec that is absent on either side counts as a change: a missing field must not make
    # the expression fail (an error applies the failurePolicy).
    match_conditions=(
        (
            "create-or-spec-change",
            "request.operation == 'CREATE' || !has(object.spec) || !has(oldObject.spec)"
            " || object.spec != oldObject.spec",
        ),
    ),
    server="quota",
    ledger_turn=True,
)
