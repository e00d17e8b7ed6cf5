"""PodGroupMinResources quota arithmetic (kube-batch "Delay Pod Creation").

Two guarantees, as pure functions over plain data:
1. the summed spec.minResources of a namespace's PodGroups never exceeds a ResourceQuota's hard
   limits (check_podgroup);
2. what a PodGroup reserved and has not yet used cannot be taken by other pods (check_pod).

Amounts are keyed by the names a ResourceQuota tracks ("requests.cpu", "pods", ...), so a
demand can be compared with `spec.hard` and `status.used` directly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from priogate.resources import (
    NANO,
    ResourceList,
    add,
    format_quantity,
    nano_units,
    parse_resource_list,
    positive_total,
)

# Resources a quota tracks both bare and as requests.<name>: the quota evaluator charges a pod's
# request of one of these to both names (pkg/quota/v1/evaluator/core/pods.go,
# podComputeUsageHelper; hugepages by their prefix). Any other resource is tracked only as
# requests.<name> (extended resources).
_BARE_AND_REQUESTS = ("cpu", "memory", "ephemeral-storage")
_HUGEPAGES = "hugepages-"
REQUESTS = "requests."
LIMITS = "limits."
POD_COUNTS = ("pods", "count/pods")
ZERO = Fraction(0)


def _tracked_bare(base: str) -> bool:
    return base in _BARE_AND_REQUESTS or base.startswith(_HUGEPAGES)


def resource_key(name: str) -> str:
    """The one resource a minResources or quota name stands for: `cpu` and `requests.cpu` are
    one, `pods` and `count/pods` are one, `limits.cpu` is its own."""
    if name in POD_COUNTS:
        return "pods"
    if name.startswith(LIMITS):
        return name
    return name.removeprefix(REQUESTS)


def quota_names(requests: Mapping[str, Fraction], pods: int) -> ResourceList:
    """Map requested resources (a pod's requests, or a PodGroup's minResources) and a pod count
    onto the names a ResourceQuota tracks: cpu to cpu and requests.cpu, an extended resource to
    requests.<name>, pods to pods and count/pods, limits.<name> to itself (summed against
    limits.* hards, as Volcano's quota check compares them when a group names them).

    Names that stand for one resource (resource_key: Volcano's job controller writes cpu and
    requests.cpu, pods and count/pods, with equal amounts) count once, the larger amount when
    they differ (admission refuses that: min_resources_problem). A pod count named in the
    resources counts as the larger of it and `pods` (minMember for a group).

    A negative amount counts as 0. Admission refuses negative minResources, but a ledger entry
    recorded before that check (or edited by hand) may hold one, and summed with the rest it
    would lower the total and let another group over-admit. Clamped rather than treated as an
    error: an error makes the whole ledger unreadable and refuses every PodGroup in the
    namespace, while 0 is the least a claim can honestly mean (too much reserved, never too
    little)."""
    out: ResourceList = {}
    count = Fraction(max(pods, 0))
    for name, amount in requests.items():
        if amount < 0:
            continue
        key = resource_key(name)
        if key == "pods":
            count = max(count, Fraction(math.ceil(amount)))
            continue
        if key.startswith(LIMITS):
            names: tuple[str, ...] = (key,)
        elif _tracked_bare(key):
            names = (key, REQUESTS + key)
        else:
            names = (REQUESTS + key,)
        for quota_name in names:
            out[quota_name] = max(out.get(quota_name, ZERO), amount)
    if count:
        out["pods"] = count
        out["count/pods"] = count
    return out


def min_resources_of(raw: Mapping[str, object] | None) -> ResourceList:
    """spec.minResources as plain resource names, what nodes must hold: requests.cpu counts as
    cpu (once, the larger, as in quota_names); limits.* and pod counts are left to the quota
    checks. A negative amount counts as 0, as in quota_names."""
    out: ResourceList = {}
    for name, amount in parse_resource_list(raw, context="spec.minResources").items():
        key = resource_key(name)
        if key.startswith(LIMITS) or key == "pods" or amount < 0:
            continue
        out[key] = max(out.get(key, ZERO), amount)
    return out


# A resource name, as kube-apiserver validates a container's or a quota's: a qualified name
# (k8s.io/apimachinery/pkg/util/validation IsQualifiedName: an optional DNS-1123 subdomain
# prefix and "/", then at most 63 alphanumerics, '-', '_' or '.', starting and ending
# alphanumeric).
# fullmatch, not match with "$": "$" also matches before a trailing newline.
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def valid_resource_name(name: str) -> bool:
    prefix, slash, part = name.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(part) <= 63 and _NAME_PART.fullmatch(part) is not None


def min_resources_problem(raw: Mapping[str, Any]) -> str | None:
    """Why spec.minResources cannot be a claim (every amount already parses), or None: a name
    that is not a resource name, or two names of one resource (resource_key) with different
    amounts. The text quotes names as JSON, so no control character reaches a terminal."""
    for name in sorted(raw):
        if not valid_resource_name(name):
            return (
                f"spec.minResources: Invalid value: {json.dumps(name)}: not a valid resource name "
                "(a qualified name such as cpu, requests.memory or example.com/gpu)"
            )
    amounts = parse_resource_list(raw, context="spec.minResources")
    first: dict[str, str] = {}
    for name in sorted(amounts):
        key = resource_key(name)
        other = first.setdefault(key, name)
        if other != name and amounts[other] != amounts[name]:
            return (
                f"spec.minResources: {other}={format_quantity(amounts[other])} and "
                f"{name}={format_quantity(amounts[name])} name one resource with two amounts "
                "(a ResourceQuota charges both from one request): give one name, or equal amounts"
            )
    return None


# ---- which quotas apply ---------------------------------------------------------------------


@dataclass(frozen=True)
class Consumer:
    """Who asks: a PodGroup (pod=None) or a pod, with its resolved priority class name."""

    priority_class: str
    pod: Mapping[str, Any] | None = None


def _scope_matches(
    scope: str, consumer: Consumer, operator: str = "Exists", values: Sequence[str] = ()
) -> bool:
    if scope == "PriorityClass":
        name = consumer.priority_class
        if operator == "In":
            return name in values
        if operator == "NotIn":
            return name not in values
        if operator == "Exists":
            return bool(name)
        if operator == "DoesNotExist":
            return not name
        return False
    pod = consumer.pod
    spec = (pod or {}).get("spec") or {}
    if scope in ("Terminating", "NotTerminating"):
        # A PodGroup has no deadline of its own: it reserves for long-running members.
        terminating = spec.get("activeDeadlineSeconds") is not None
        return terminating == (scope == "Terminating")
    if scope in ("BestEffort", "NotBestEffort"):
        best_effort = pod is not None and not any(
            (c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
        )
        return best_effort == (scope == "BestEffort")
    if scope == "CrossNamespacePodAffinity":
        affinity = spec.get("affinity") or {}
        terms = []
        for kind in ("podAffinity", "podAntiAffinity"):
            section = affinity.get(kind) or {}
            terms += section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
            terms += [
                t.get("podAffinityTerm") or {}
                for t in section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            ]
        return any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms)
    return False  # scopes for other kinds (e.g. VolumeAttributesClass) never match pods


def quota_applies(quota: Mapping[str, Any], consumer: Consumer) -> bool:
    """ResourceQuota scoping: every listed scope and every scopeSelector expression must match."""
    spec = quota.get("spec") or {}
    for scope in spec.get("scopes") or []:
        if not _scope_matches(scope, consumer):
            return False
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        if not _scope_matches(
            expr.get("scopeName", ""), consumer, expr.get("operator", ""), expr.get("values") or []
        ):
            return False
    return True


def hard_limits(quota: Mapping[str, Any]) -> ResourceList:
    return parse_resource_list(
        (quota.get("spec") or {}).get("hard"), context=f"ResourceQuota {_name(quota)} hard"
    )


def used(quota: Mapping[str, Any]) -> ResourceList:
    return parse_resource_list(
        (quota.get("status") or {}).get("used"), context=f"ResourceQuota {_name(quota)} used"
    )


def _name(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def format_amounts(names: Iterable[str], amounts: Mapping[str, Fraction]) -> str:
    """ "cpu=2, pods=3": the amounts of `names`, for denial and status texts."""
    return ", ".join(f"{n}={format_quantity(amounts.get(n, ZERO))}" for n in names)


# ---- the one comparison: demand on top of what is used and reserved, against hard -------------


@dataclass(frozen=True)
class Reservation:
    """One admitted PodGroup's reservation (or what is left of it), in quota names."""

    group: str
    priority_class: str
    demand: ResourceList


@dataclass(frozen=True)
class Exceeded:
    """The first quota (by name) that a demand would push over its hard limits."""

    quota: str
    over: list[str]  # the resource names over hard, sorted
    hard: ResourceList
    used: ResourceList  # {} when status.used is not counted
    reserved: ResourceList  # by the reservations the quota applies to


def _reserved_under(quota: Mapping[str, Any], reservations: Sequence[Reservation]) -> ResourceList:
    """The summed reservations `quota` applies to. Only positive amounts add up (see
    quota_names): a Reservation built by hand with a negative amount must not lower what the
    others reserve either."""
    # Scopes are judged per priority class: a namespace has hundreds of groups, few classes.
    applies = {cls: quota_applies(quota, Consumer(cls)) for cls in {r.priority_class for r in reservations}}
    return positive_total(r.demand for r in reservations if applies[r.priority_class])


def first_exceeded(
    quotas: Iterable[Mapping[str, Any]],
    consumer: Consumer,
    demand: Mapping[str, Fraction],
    reservations: Iterable[Reservation],
    *,
    count_used: bool,
    reserved_names_only: bool = False,
    charged: Mapping[str, Fraction] | None = None,
) -> Exceeded | None:
    """For each quota that applies to `consumer`, in name order: the resources where
    (status.used, when `count_used`) + the reservations it applies to + `demand` exceed hard.
    With `reserved_names_only`, only resources some reservation holds count, and a quota with no
    reservations at all is not read (the built-in ResourceQuota plugin judges it alone)."""
    reservations = list(reservations)
    for quota in sorted(quotas, key=lambda q: str(_name(q))):
        if not quota_applies(quota, consumer):
            continue
        reserved = _reserved_under(quota, reservations)
        if reserved_names_only and not reserved:
            continue
        hard = hard_limits(quota)
        in_use = add(used(quota), charged or {}) if count_used else {}
        over = sorted(
            name
            for name, limit in hard.items()
            if demand.get(name, ZERO) > 0
            and (reserved.get(name, ZERO) > 0 or not reserved_names_only)
            and in_use.get(name, ZERO) + reserved.get(name, ZERO) + demand[name] > limit
        )
        if over:
            return Exceeded(_name(quota), over, hard, in_use, reserved)
    return None


# ---- guarantee 1: summed reservations within hard ---------------------------------------------


def check_podgroup(
    quotas: Iterable[Mapping[str, Any]], others: Iterable[Reservation], this: Reservation
) -> str | None:
    """Refuse when the namespace's admitted reservations plus this one exceed a quota's hard."""
    found = first_exceeded(quotas, Consumer(this.priority_class), this.demand, others, count_used=False)
    if found is None:
        return None
    over = found.over
    return (
        f"exceeded quota: {found.quota}, requested: {format_amounts(over, this.demand)}, "
        f"reserved: {format_amounts(over, found.reserved)}, limited: {format_amounts(over, found.hard)}: "
        "the summed minResources of the namespace's PodGroups may not exceed its ResourceQuota"
    )


# ---- guarantee 2: reservations are not for others --------------------------------------------


def unconsumed(reservation: Reservation, consumed: Mapping[str, Fraction]) -> ResourceList:
    """What a group reserved and its own running pods do not use yet."""
    return {
        name: amount - consumed.get(name, ZERO)
        for name, amount in reservation.demand.items()
        if amount > consumed.get(name, ZERO)
    }


def check_pod(
    quotas: Iterable[Mapping[str, Any]],
    pod_consumer: Consumer,
    pod_demand: Mapping[str, Fraction],
    other_groups: Iterable[tuple[Reservation, ResourceList]],
    charged: Mapping[str, Fraction] | None = None,
) -> str | None:
    """Refuse when used + this pod's request + the unconsumed reservations of other groups
    exceed hard. `other_groups` pairs each reservation with its unconsumed part; the pod's own
    group is left out, so a member draws on its own reservation first. `charged`: requests of
    pods admitted a moment ago that status.used may not show yet."""
    unconsumed_parts = (
        Reservation(reservation.group, reservation.priority_class, left) for reservation, left in other_groups
    )
    found = first_exceeded(
        quotas,
        pod_consumer,
        pod_demand,
        unconsumed_parts,
        count_used=True,
        reserved_names_only=True,
        charged=charged,
    )
    if found is None:
        return None
    over = found.over
    return (
        f"exceeded quota: {found.quota}, requested: {format_amounts(over, pod_demand)}, "
        f"used: {format_amounts(over, found.used)}, reserved by PodGroups: "
        f"{format_amounts(over, found.reserved)}, limited: {format_amounts(over, found.hard)}: "
        "resources reserved by PodGroups' minResources cannot be used by other pods"
    )


# ---- a quota lowered below what is reserved ----------------------------------------------------


def positive_nanos(reservation: Reservation) -> dict[str, int | Fraction]:
    """A reservation's positive amounts in nano-units (resources.nano_units), for class_totals."""
    return nano_units({name: amount for name, amount in reservation.demand.items() if amount > 0})


def class_totals(parts: Iterable[tuple[str, Mapping[str, int | Fraction]]]) -> list[Reservation]:
    """(priority class, positive_nanos) pairs summed into one Reservation per class. A quota's
    scopes judge a reservation by its class alone, so every quota reserves under these exactly
    what it reserves under the reservations they sum (as _reserved_under sums positive amounts)."""
    totals: dict[str, dict[str, int | Fraction]] = {}
    for priority_class, amounts in parts:
        total = totals.setdefault(priority_class, {})
        for name, amount in amounts.items():
            total[name] = total.get(name, 0) + amount
    return [
        Reservation(
            "",
            cls,
            {name: Fraction(n, NANO) if isinstance(n, int) else n / NANO for name, n in total.items()},
        )
        for cls, total in totals.items()
    ]


def over_reserved(quotas: Iterable[Mapping[str, Any]], reservations: Iterable[Reservation]) -> str | None:
    """Why the namespace's admitted reservations exceed a quota's hard limits (a quota lowered
    since they were admitted), or None. Admitted groups keep their reservations (refusing would
    free nothing); growth and new groups are refused until the sum fits again."""
    reservations = list(reservations)
    for quota in sorted(quotas, key=lambda q: str(_name(q))):
        reserved = _reserved_under(quota, reservations)
        hard = hard_limits(quota)
        over = sorted(name for name, limit in hard.items() if reserved.get(name, ZERO) > limit)
        if over:
            return (
                f"quota {_name(quota)} ({format_amounts(over, hard)}) is below the namespace's "
                f"PodGroup reservations ({format_amounts(over, reserved)}): admitted groups keep "
                "theirs; growth and new groups are refused until the sum fits"
            )
    return None
