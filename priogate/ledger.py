"""The reservation ledger: which PodGroups hold a reservation in a namespace, as plain data.

The ledger's authoritative copy is one ConfigMap per namespace in the API server
(priogate/kube/ledger_store.py writes it with optimistic concurrency); this module only turns
its entries into Reservations and decides which entries are stale. A ConfigMap rather than a
custom resource because every admission rewrites it: a built-in type's read-modify-write is
several times cheaper than a CRD object's, whose managedFields grow with every entry (README
has the measurement).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from priogate.clock import parse_rfc3339
from priogate.quota import Reservation, quota_names
from priogate.resources import format_quantity, parse_resource_list

LEDGER_NAME = "priogate-podgroup-reservations"
LEDGER_LABEL = ("priogate.io/ledger", "podgroup-reservations")
LEDGER_DATA_KEY = "reservations.json"
DEFAULT_RECLAIM_GRACE = dt.timedelta(seconds=60)


@dataclass(frozen=True)
class Entry:
    """Keyed in the ledger by the PodGroup's uid, not its name: two creates of one name (one of
    which storage refuses) then hold two entries until the loser is reclaimed. Too much is
    reserved for a moment; never too little."""

    group: str
    uid: str
    min_resources: Mapping[str, str]  # normalized quantity strings, as stored
    min_member: int
    priority_class: str
    admitted_at: str  # RFC 3339

    @property
    def key(self) -> str:
        return self.uid or f"name:{self.group}"

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "minResources": dict(self.min_resources),
            "minMember": self.min_member,
            "priorityClassName": self.priority_class,
            "admittedAt": self.admitted_at,
        }

    @classmethod
    def from_json(cls, key: str, raw: Mapping[str, Any]) -> Entry:
        return cls(
            group=raw.get("group", ""),
            uid="" if key.startswith("name:") else key,
            min_resources=dict(raw.get("minResources") or {}),
            min_member=int(raw.get("minMember") or 0),
            priority_class=raw.get("priorityClassName") or "",
            admitted_at=raw.get("admittedAt") or "",
        )

    def reservation(self) -> Reservation:
        requests = parse_resource_list(self.min_resources, context=f"ledger entry {self.group}")
        return Reservation(self.group, self.priority_class, quota_names(requests, self.min_member))

    def same_claim(self, other: Entry) -> bool:
        return (self.key, dict(self.min_resources), self.min_member, self.priority_class) == (
            other.key,
            dict(other.min_resources),
            other.min_member,
            other.priority_class,
        )


def normalize(min_resources: Mapping[str, Any]) -> dict[str, str]:
    """Parse and re-format quantities so equal amounts compare equal ("1000m" == "1")."""
    return {name: format_quantity(q) for name, q in sorted(parse_resource_list(min_resources).items())}


def ledger_path(namespace: str, *, collection: bool = False) -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return base if collection else f"{base}/{LEDGER_NAME}"


def entries_of(ledger: Mapping[str, Any] | None) -> dict[str, Entry]:
    """Entries by key (the PodGroup's uid). A ledger that is not ours to read raises ValueError:
    guessing would risk over-admission."""
    raw_json = ((ledger or {}).get("data") or {}).get(LEDGER_DATA_KEY) or "{}"
    try:
        raw = json.loads(raw_json)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return {key: Entry.from_json(key, value) for key, value in raw.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(
            f"ConfigMap {LEDGER_NAME} key {LEDGER_DATA_KEY} is not a reservation ledger ({e}); "
            "restore it or delete it so priogate rebuilds it from the admitted PodGroups"
        ) from None


def ledger_object(
    namespace: str, entries: Mapping[str, Entry], resource_version: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": LEDGER_NAME,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/managed-by": "priogate", LEDGER_LABEL[0]: LEDGER_LABEL[1]},
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    data = {key: e.to_json() for key, e in sorted(entries.items())}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {LEDGER_DATA_KEY: json.dumps(data, separators=(",", ":"), sort_keys=True)},
    }


def stale_entries(
    entries: Mapping[str, Entry],
    live_groups: Mapping[str, str],
    now: dt.datetime,
    grace: dt.timedelta = DEFAULT_RECLAIM_GRACE,
) -> list[str]:
    """Keys of entries whose PodGroup never got stored (a later admission step refused it) or is
    gone: no live group with that uid, and admitted longer than `grace` ago, so a group admitted
    a moment ago and not yet in the cache keeps its reservation. `live_groups` maps uid to name."""
    stale = []
    for key, entry in entries.items():
        if entry.uid and entry.uid in live_groups:
            continue
        try:
            admitted = parse_rfc3339(entry.admitted_at)
        except ValueError:
            admitted = dt.datetime.min.replace(tzinfo=dt.UTC)  # unreadable: treat as old
        if now - admitted > grace:
            stale.append(key)
    return sorted(stale)


class MemoryLedgerStore:
    """The ledger kept in this process: same interface and decide() contract as the API-server
    store, for a single-process server (offline mode, benchmarks) and in-process tests."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self.ledgers: dict[str, dict[str, Entry]] = {}
        self.writes = 0

    def update(
        self, namespace: str, decide: Any, *, dry_run: bool = False, deadline: float | None = None
    ) -> Any:
        with self._lock:
            new_entries, result = decide(dict(self.ledgers.get(namespace, {})))
            if new_entries is not None and not dry_run:
                self.ledgers[namespace] = dict(new_entries)
                self.writes += 1
            return result
