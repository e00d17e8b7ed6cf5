"""`kubectl priogate reservations`: per namespace and ResourceQuota, what is hard, used, reserved
by PodGroups, reserved but not used yet, and free. Pure: objects in, rows out.

The arithmetic is the pod quota hook's (webhook/rules/pod_quota.py): a pod outside the groups
is refused when used + request + the groups' unconsumed reservations > hard, so what such a
pod can still take is hard - used - unconsumed. A group's consumption is the requests of its
unfinished member pods, in quota names (webhook/view.py), and a ledger entry of a group that
never got stored or is gone stops counting once a LIST shows it absent past the in-flight
bound (priogate.ledger.model.stale_entries).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kubectl_priogate.output import NONE, quantities, quantity, shown, table
from priogate import podgroup
from priogate.ledger.codec import CONFIGMAP_MAX_BYTES
from priogate.ledger.model import Entry
from priogate.ledger.settlement import stale_entries
from priogate.quota import Consumer, hard_limits, quota_applies, quota_names, unconsumed, used
from priogate.resources import ResourceList, add, pod_requests

ZERO = Fraction(0)
NO_QUOTA = "<none>"
# The table names a namespace whose ledger fills at least this share of its ConfigMap: past the
# whole of it, new PodGroups with reservations are refused (docs/limits.md).
LEDGER_FILL_NOTED = 0.5


@dataclass(frozen=True)
class Hold:
    """One PodGroup's reservation in the ledger, and how much of it its members use."""

    group: str
    uid: str
    phase: str  # "" while the group is not stored (yet): admitted a moment ago, or refused later
    priority_class: str
    admitted_at: str
    reserved: ResourceList  # quota names
    consumed: ResourceList
    unconsumed: ResourceList


@dataclass(frozen=True)
class Row:
    namespace: str
    quota: str  # NO_QUOTA: reservations in a namespace without a ResourceQuota
    resource: str
    hard: Fraction | None
    used: Fraction | None  # None until the quota controller has counted
    reserved: Fraction
    unconsumed: Fraction
    free: Fraction | None
    groups: tuple[tuple[str, Fraction], ...]  # (group, reserved amount), groups holding some


@dataclass(frozen=True)
class NamespaceReport:
    namespace: str
    rows: tuple[Row, ...]
    holds: tuple[Hold, ...]
    stale: tuple[str, ...]  # groups of ledger entries that no longer count
    ledger_bytes: int | None = None  # the ledger's stored size; None when it could not be read


def consumed_by_group(pods: Iterable[Mapping[str, Any]]) -> dict[str, ResourceList]:
    """Group name -> quota-named requests of its unfinished member pods (what status.used
    already counts of it)."""
    consumed: dict[str, ResourceList] = {}
    for pod in pods:
        group = podgroup.group_of(pod)
        if group and not podgroup.is_terminal(pod):
            consumed[group] = add(consumed.get(group, {}), quota_names(pod_requests(pod), 1))
    return consumed


def holds_of(
    entries: Mapping[str, Entry],
    podgroups: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    now: dt.datetime,
) -> tuple[list[Hold], list[str]]:
    """The entries that count (as admission counts them), and the groups of those that do not."""
    groups = {(g.get("metadata") or {}).get("uid", ""): g for g in podgroups}
    live = {uid: (g.get("metadata") or {}).get("name", "") for uid, g in groups.items()}
    stale = set(stale_entries(entries, live, now))
    consumed = consumed_by_group(pods)
    holds = []
    for key, entry in sorted(entries.items(), key=lambda item: (item[1].group, item[0])):
        if key in stale:
            continue
        reservation = entry.reservation()
        used_now = consumed.get(entry.group, {})
        group = groups.get(entry.uid) or {}
        holds.append(
            Hold(
                group=entry.group,
                uid=entry.uid,
                phase=str((group.get("status") or {}).get("phase") or ("Pending" if group else "")),
                priority_class=entry.priority_class,
                admitted_at=entry.admitted_at,
                reserved=reservation.demand,
                consumed={n: a for n, a in used_now.items() if n in reservation.demand},
                unconsumed=unconsumed(reservation, used_now),
            )
        )
    return holds, sorted(entries[k].group for k in stale)


def quota_rows(namespace: str, quota: Mapping[str, Any], holds: Sequence[Hold]) -> list[Row]:
    """One row per resource the quota limits."""
    name = str((quota.get("metadata") or {}).get("name", ""))
    applying = [h for h in holds if quota_applies(quota, Consumer(h.priority_class))]
    hard = hard_limits(quota)
    counted = "used" in (quota.get("status") or {})
    in_use = used(quota)
    rows = []
    for resource in sorted(hard):
        reserved = sum((h.reserved.get(resource, ZERO) for h in applying), ZERO)
        left = sum((h.unconsumed.get(resource, ZERO) for h in applying), ZERO)
        usage = in_use.get(resource, ZERO) if counted else None
        rows.append(
            Row(
                namespace=namespace,
                quota=name,
                resource=resource,
                hard=hard[resource],
                used=usage,
                reserved=reserved,
                unconsumed=left,
                free=None if usage is None else hard[resource] - usage - left,
                groups=tuple(
                    (h.group, h.reserved[resource]) for h in applying if h.reserved.get(resource, ZERO) > 0
                ),
            )
        )
    return rows


def unlimited_rows(namespace: str, holds: Sequence[Hold]) -> list[Row]:
    """Reservations in a namespace no ResourceQuota limits: nothing to compare them with, but
    who holds what is still worth showing."""
    total: ResourceList = {}
    for h in holds:
        total = add(total, h.reserved)
    return [
        Row(
            namespace=namespace,
            quota=NO_QUOTA,
            resource=resource,
            hard=None,
            used=None,
            reserved=amount,
            unconsumed=sum((h.unconsumed.get(resource, ZERO) for h in holds), ZERO),
            free=None,
            groups=tuple(
                (h.group, h.reserved[resource]) for h in holds if h.reserved.get(resource, ZERO) > 0
            ),
        )
        for resource, amount in sorted(total.items())
        # quota_names gives cpu both bare and as requests.cpu, pods also as count/pods: with no
        # quota naming one of them, show each amount once.
        if not (resource.startswith("requests.") and resource.removeprefix("requests.") in total)
        and not (resource == "count/pods" and "pods" in total)
    ]


def namespace_report(
    namespace: str,
    quotas: Iterable[Mapping[str, Any]],
    entries: Mapping[str, Entry],
    podgroups: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    now: dt.datetime,
    ledger_bytes: int | None = None,
) -> NamespaceReport:
    holds, stale = holds_of(entries, podgroups, pods, now)
    quotas = sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name", "")))
    rows: list[Row] = []
    for quota in quotas:
        rows.extend(quota_rows(namespace, quota, holds))
    if not quotas and holds:
        rows = unlimited_rows(namespace, holds)
    return NamespaceReport(namespace, tuple(rows), tuple(holds), tuple(stale), ledger_bytes)


# ---- output ------------------------------------------------------------------------------------


def _groups_cell(groups: Sequence[tuple[str, Fraction]]) -> str:
    return ",".join(f"{g}={quantity(a)}" for g, a in groups) or NONE


def render_table(reports: Sequence[NamespaceReport], *, all_namespaces: bool) -> str:
    headers = ["quota", "resource", "hard", "used", "reserved", "reserved-unused", "free", "podgroups"]
    if all_namespaces:
        headers.insert(0, "namespace")
    rows = []
    for report in reports:
        for r in report.rows:
            cells = [
                r.quota,
                r.resource,
                quantity(r.hard),
                quantity(r.used),
                quantity(r.reserved),
                quantity(r.unconsumed),
                quantity(r.free),
                _groups_cell(r.groups),
            ]
            rows.append([r.namespace, *cells] if all_namespaces else cells)
    return table(headers, rows) + "".join(_ledger_fill_note(report) for report in reports)


def _ledger_fill_note(report: NamespaceReport) -> str:
    if report.ledger_bytes is None or report.ledger_bytes < LEDGER_FILL_NOTED * CONFIGMAP_MAX_BYTES:
        return ""
    share = report.ledger_bytes / CONFIGMAP_MAX_BYTES
    return (
        f"\nThe ledger of namespace {shown(report.namespace)} is {share:.0%} full"
        f" ({report.ledger_bytes / 1024:.0f} KiB of {CONFIGMAP_MAX_BYTES // 1024} KiB):"
        " once it is full, new PodGroups with minResources are refused; delete the PodGroups"
        " that are no longer needed.\n"
    )


def to_json(reports: Sequence[NamespaceReport]) -> dict[str, Any]:
    namespaces = []
    for report in reports:
        quotas: dict[str, dict[str, Any]] = {}
        for r in report.rows:
            quotas.setdefault(r.quota, {})[r.resource] = {
                "hard": None if r.hard is None else quantity(r.hard),
                "used": None if r.used is None else quantity(r.used),
                "reserved": quantity(r.reserved),
                "reservedUnused": quantity(r.unconsumed),
                "free": None if r.free is None else quantity(r.free),
                "podGroups": {g: quantity(a) for g, a in r.groups},
            }
        namespaces.append(
            {
                "namespace": report.namespace,
                "quotas": [{"name": q, "resources": resources} for q, resources in quotas.items()],
                "podGroups": [
                    {
                        "name": h.group,
                        "uid": h.uid,
                        "phase": h.phase or None,
                        "priorityClassName": h.priority_class,
                        "admittedAt": h.admitted_at,
                        "reserved": quantities(h.reserved),
                        "used": quantities(h.consumed),
                        "reservedUnused": quantities(h.unconsumed),
                    }
                    for h in report.holds
                ],
                "staleEntries": list(report.stale),
                "ledger": None
                if report.ledger_bytes is None
                else {"bytes": report.ledger_bytes, "limitBytes": CONFIGMAP_MAX_BYTES},
            }
        )
    return {"namespaces": namespaces}
