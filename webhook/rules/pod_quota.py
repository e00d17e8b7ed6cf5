"""Validating pods: resources reserved by PodGroups cannot be used by other pods.

With hard H, usage U (the quota's status.used) and the unconsumed reservations R of the groups
other than the pod's own, a pod is refused when U + request + R > H. A member of a group draws
on its own group's reservation first, because its own group is left out of R. Answered from
caches only: the ledger, quota and pod watches."""

from __future__ import annotations

import datetime as dt

from priogate import podgroup
from priogate.ledger import stale_entries
from priogate.quota import Consumer, check_pod, quota_names, unconsumed
from priogate.resources import pod_requests
from webhook.objects import MalformedObject, check_containers, mapping, new_object, optional_str
from webhook.registry import ClusterView, RuleSet
from webhook.review import AdmissionRequest, Decision, allow, deny


def admit(request: AdmissionRequest, view: ClusterView) -> Decision:
    if request.operation != "CREATE" or request.sub_resource:
        return allow()
    pod = new_object(request)
    mapping(pod, "metadata", "object")
    spec = mapping(pod, "spec", "object")
    quotas = view.resource_quotas(request.namespace)
    if not quotas:
        return allow()
    try:
        state = view.reservations(request.namespace)
    except ValueError as e:  # an unreadable ledger: refuse rather than guess
        return deny(str(e), code=503, reason="ServiceUnavailable")
    if not state.entries:
        return allow()
    own_group = podgroup.group_of(pod)
    # Entries of groups that never got stored or are gone no longer reserve anything.
    stale = set(stale_entries(state.entries, view.live_podgroups(request.namespace), dt.datetime.now(dt.UTC)))
    others = []
    for key, entry in state.entries.items():
        if entry.group == own_group or key in stale:
            continue
        reservation = entry.reservation()
        left = unconsumed(reservation, state.consumed_by_group.get(entry.group, {}))
        if left:
            others.append((reservation, left))
    if not others:
        return allow()
    check_containers(spec, "object.spec")
    try:
        demand = quota_names(pod_requests(pod), 1)
    except ValueError as e:
        raise MalformedObject(str(e)) from None
    consumer = Consumer(optional_str(spec, "priorityClassName", "object.spec") or "", pod)
    problem = check_pod(quotas, consumer, demand, others)
    return deny(problem) if problem else allow()


RULE_SET = RuleSet(
    name="pod-quota.priogate.io",
    path="/validate/pods",
    kind="validating",
    handler=admit,
    api_groups=("",),
    api_versions=("v1",),
    resources=("pods",),
    operations=("CREATE",),
    needs=("resourcequotas", "ledgers", "pods", "podgroups"),
    server="quota",
)
