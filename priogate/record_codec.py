"""Where a reservation record lives, and its ConfigMap read and written (priogate/ledger.py says
what a record is). One ConfigMap per tenant namespace, in priogate's own namespace, where only
priogate may write: `priogate-system/podgroup-reservations.<namespace>`, labelled with the
namespace it covers so it is found by label as well as by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from priogate.ledger import Charge, DamagedRecord, Entry, Record
from priogate.quota_fence import QuotaFence

DEFAULT_LEDGER_NAMESPACE = "priogate-system"
RECORD_PREFIX = "podgroup-reservations."
LEDGER_LABEL = ("priogate.io/ledger", "podgroup-reservations")
# The tenant namespace a record covers, so a record is found by label as well as by name.
COVERS_LABEL = "priogate.io/ledger-namespace"
LEDGER_DATA_KEY = "reservations.json"
CHARGES_DATA_KEY = "charges.json"
# Quota changes on their way to storage (priogate.quota_fence); written only while there are any.
FENCES_DATA_KEY = "quota-fences.json"


def record_name(namespace: str) -> str:
    return f"{RECORD_PREFIX}{namespace}"


def covered_namespace(record: Mapping[str, Any]) -> str:
    """The tenant namespace a record ConfigMap covers ("" if it is not a record)."""
    meta = record.get("metadata") or {}
    name = meta.get("name") or ""
    labelled = (meta.get("labels") or {}).get(COVERS_LABEL, "")
    if not name.startswith(RECORD_PREFIX) or name.removeprefix(RECORD_PREFIX) != labelled:
        return ""
    return labelled


def record_path(ledger_namespace: str, namespace: str | None = None) -> str:
    """The record of `namespace` in `ledger_namespace`, or (namespace None) their collection."""
    base = f"/api/v1/namespaces/{ledger_namespace}/configmaps"
    return base if namespace is None else f"{base}/{record_name(namespace)}"


# ---- reading and writing the ConfigMap --------------------------------------------------------


def record_of(obj: Mapping[str, Any]) -> Record:
    """The record a stored ConfigMap holds; DamagedRecord when it is not one priogate wrote
    (then it is rebuilt from the stored PodGroups, never guessed at)."""
    data = obj.get("data") or {}
    try:
        raw_entries = json.loads(data.get(LEDGER_DATA_KEY) or "{}")
        raw_charges = json.loads(data.get(CHARGES_DATA_KEY) or "{}")
        if not isinstance(raw_entries, dict) or not isinstance(raw_charges, dict):
            raise ValueError("not a JSON object")
        entries = {key: Entry.from_json(key, value) for key, value in raw_entries.items()}
        for entry in entries.values():
            entry.reservation()
        charges = {key: Charge.from_json(value) for key, value in raw_charges.items()}
        for charge in charges.values():
            charge.amounts()
        raw_fences = json.loads(data.get(FENCES_DATA_KEY) or "[]")
        if not isinstance(raw_fences, list):
            raise ValueError("quota fences are not a JSON list")
        fences = {f.key: f for f in map(QuotaFence.from_json, raw_fences)}
    except (ValueError, TypeError, AttributeError) as e:
        name = (obj.get("metadata") or {}).get("name", "")
        raise DamagedRecord(f"ConfigMap {name} is not a reservation record ({e})") from None
    return Record(entries, charges, fences)


def entries_of(obj: Mapping[str, Any] | None) -> dict[str, Entry]:
    """The entries of a stored record ({} for none); DamagedRecord when unreadable."""
    return dict(record_of(obj).entries) if obj else {}


def record_object(
    ledger_namespace: str, namespace: str, record: Record, resource_version: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": record_name(namespace),
        "namespace": ledger_namespace,
        "labels": {
            "app.kubernetes.io/managed-by": "priogate",
            LEDGER_LABEL[0]: LEDGER_LABEL[1],
            COVERS_LABEL: namespace,
        },
    }
    if resource_version:
        meta["resourceVersion"] = resource_version
    # What json.dumps(..., sort_keys=True) writes for the whole map, from each entry's own text.
    entries = ",".join(f"{json.dumps(key)}:{e.json_text}" for key, e in sorted(record.entries.items()))
    charges = {key: c.to_json() for key, c in sorted(record.charges.items())}
    data = {
        LEDGER_DATA_KEY: f"{{{entries}}}",
        CHARGES_DATA_KEY: json.dumps(charges, separators=(",", ":"), sort_keys=True),
    }
    if record.fences:
        fences = [f.to_json() for _, f in sorted(record.fences.items())]
        data[FENCES_DATA_KEY] = json.dumps(fences, separators=(",", ":"), sort_keys=True)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
