"""Where a ledger lives, and its ConfigMap read and written (priogate/ledger/model.py says
what a ledger is). One ConfigMap per tenant namespace, in priogate's own namespace, where only
priogate may write: `priogate-system/podgroup-ledger.<namespace>`, labelled with the
namespace it covers so it is found by label as well as by name.

The entries are stored in SHARDS zlib-compressed JSON objects, base64 text in `data`, each
holding the keys that hash to it (zlib.crc32), not as one JSON text:
- Size: the ledger holds an entry per PodGroup, about 230 bytes as JSON, and a ConfigMap holds
  at most 1 MiB (ValidateConfigMap in kubernetes pkg/apis/core/validation, MaxSecretSize): one
  JSON text fills it at about 4,500 groups, the compressed shards at several times that.
- Cost: every turn GETs and PUTs the whole ledger, and every watcher of it (each quota worker,
  the controller) hears every write; fewer bytes are less for kube-apiserver, etcd and each of
  them to move and parse. A turn changes a few entries, so most shards are as the last read or
  write left them: a shard's text and entries are kept by its compressed value (bounded), and
  only changed shards are compressed, or parsed, again.
- Text, not binaryData: on every update kube-apiserver compares the old and the new object with
  a reflective DeepEqual (the field manager's IgnoreManagedFieldsTimestampsTransformer, in
  k8s.io/apiserver pkg/endpoints/handlers/fieldmanager), which walks a []byte element by element
  but compares a string at once, so binaryData made every ledger PUT cost kube-apiserver more
  CPU (docs/ledger.md). base64 text counts a third more against the 1 MiB than the bytes it holds.
A ConfigMap in any other form (`reservations.json` not the marker below, or shards in
binaryData) is not a ledger priogate wrote: it is read as damaged and rebuilt from the stored
PodGroups (ledger_store), never guessed at.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping
from typing import Any

from priogate import api_json
from priogate.ledger.fences import QuotaFence
from priogate.ledger.model import Charge, DamagedLedger, Entry, Ledger

DEFAULT_LEDGER_NAMESPACE = "priogate-system"
LEDGER_PREFIX = "podgroup-ledger."
LEDGER_LABEL = ("priogate.io/ledger", "podgroup-ledger")
# The tenant namespace a ledger covers, so a ledger is found by label as well as by name.
COVERS_LABEL = "priogate.io/ledger-namespace"
LEDGER_DATA_KEY = "reservations.json"
CHARGES_DATA_KEY = "charges.json"
# Quota changes on their way to storage (priogate.ledger.fences); written only while there are any.
FENCES_DATA_KEY = "quota-fences.json"
SHARDS = 16
SHARD_KEY_PREFIX = "reservations."
SHARD_KEY_SUFFIX = ".json.zlib.base64"
# What a ledger's LEDGER_DATA_KEY holds: where its entries are.
SHARDED_MARKER = f"entries in data {SHARD_KEY_PREFIX}NN{SHARD_KEY_SUFFIX} (base64 of zlib-compressed JSON)"
# kube-apiserver refuses a ConfigMap whose data and binaryData (decoded) hold more bytes than
# this (core.MaxSecretSize, which ValidateConfigMap applies to ConfigMaps too).
CONFIGMAP_MAX_BYTES = 1024 * 1024
# A shard that inflates past this is not one priogate wrote (its entries would never fit the
# ConfigMap uncompressed, or even compressed 64 times over).
SHARD_MAX_TEXT_BYTES = 64 * CONFIGMAP_MAX_BYTES
# zlib's fastest level: each PUT compresses its changed shards, and the ratio it loses against
# the default level is small for entries this alike.
COMPRESSION_LEVEL = 1
# Ledgers whose shards are kept below: cleared when more (namespaces come and go).
_KEPT_LEDGERS = 4096


class LedgerFull(ValueError):
    """The ledger, encoded, would exceed what kube-apiserver stores in one ConfigMap."""


def shard_of(key: str) -> int:
    return zlib.crc32(key.encode()) % SHARDS


def shard_key(shard: int) -> str:
    return f"{SHARD_KEY_PREFIX}{shard:02d}{SHARD_KEY_SUFFIX}"


# A shard's key -> the shard.
_SHARD_OF_KEY = {shard_key(i): i for i in range(SHARDS)}
# Per shard of each ledger (its name, the shard): the value last read or written and its
# entries, and the entries last written and their value. A turn changes a few shards, so the next
# read or write of the ledger finds the others here. Only the last of each is kept, so memory
# follows the ledgers, not the turns (a memo by value kept every version of a large shard).
_READ: dict[tuple[str, int], tuple[str, dict[str, Entry]]] = {}
_WRITTEN: dict[tuple[str, int], tuple[tuple[tuple[str, Entry], ...], str]] = {}


def ledger_name(namespace: str) -> str:
    return f"{LEDGER_PREFIX}{namespace}"


def covered_namespace(ledger: Mapping[str, Any]) -> str:
    """The tenant namespace a ledger ConfigMap covers ("" if it is not a ledger)."""
    meta = ledger.get("metadata") or {}
    name = meta.get("name") or ""
    labelled = (meta.get("labels") or {}).get(COVERS_LABEL, "")
    if not name.startswith(LEDGER_PREFIX) or name.removeprefix(LEDGER_PREFIX) != labelled:
        return ""
    return labelled


def ledger_path(ledger_namespace: str, namespace: str | None = None) -> str:
    """The ledger of `namespace` in `ledger_namespace`, or (namespace None) their collection."""
    base = f"/api/v1/namespaces/{ledger_namespace}/configmaps"
    return base if namespace is None else f"{base}/{ledger_name(namespace)}"


# ---- reading and writing the ConfigMap --------------------------------------------------------


def ledger_of(obj: Mapping[str, Any]) -> Ledger:
    """The ledger a stored ConfigMap holds; DamagedLedger when it is not one priogate wrote
    (then it is rebuilt from the stored PodGroups, never guessed at)."""
    data = obj.get("data") or {}
    try:
        if data.get(LEDGER_DATA_KEY) != SHARDED_MARKER:
            raise ValueError(f"{LEDGER_DATA_KEY} does not say where the entries are")
        if obj.get("binaryData"):
            raise ValueError("binaryData is not where a ledger's entries are")
        shards = {k: v for k, v in data.items() if k.startswith(SHARD_KEY_PREFIX) and k != LEDGER_DATA_KEY}
        name = (obj.get("metadata") or {}).get("name", "")
        entries = _sharded_entries(name, shards)  # no shard: an empty ledger
        raw_charges = json.loads(data.get(CHARGES_DATA_KEY) or "{}")
        if not isinstance(raw_charges, dict):
            raise ValueError("charges are not a JSON object")
        charges = {key: Charge.from_json(value) for key, value in raw_charges.items()}
        for charge in charges.values():
            charge.amounts()
        raw_fences = json.loads(data.get(FENCES_DATA_KEY) or "[]")
        if not isinstance(raw_fences, list):
            raise ValueError("quota fences are not a JSON list")
        fences = {f.key: f for f in map(QuotaFence.from_json, raw_fences)}
    except (ValueError, TypeError, AttributeError, zlib.error) as e:
        name = (obj.get("metadata") or {}).get("name", "")
        raise DamagedLedger(f"ConfigMap {name} is not a ledger ({e})") from None
    return Ledger(entries, charges, fences)


def _entries(raw: Any) -> dict[str, Entry]:
    if not isinstance(raw, dict):
        raise ValueError("entries are not a JSON object")
    entries = {key: Entry.from_json(key, value) for key, value in raw.items()}
    for entry in entries.values():
        entry.reservation()
    return entries


def _sharded_entries(ledger: str, shards: Mapping[str, Any]) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for name, packed in shards.items():
        shard = _SHARD_OF_KEY.get(name)
        if shard is None or not isinstance(packed, str):
            raise ValueError(f"{name} is not a shard of entries")
        last = _READ.get((ledger, shard))
        if last is not None and last[0] == packed:
            known = last[1]
        else:
            known = _unpacked(shard, name, packed)
            _keep(_READ, (ledger, shard), (packed, known))
        entries.update(known)
    return entries


def _keep(memo: dict[tuple[str, int], Any], key: tuple[str, int], value: Any) -> None:
    if len(memo) >= _KEPT_LEDGERS * SHARDS and key not in memo:
        memo.clear()
    memo[key] = value


def _unpacked(shard: int, name: str, packed: str) -> dict[str, Entry]:
    inflater = zlib.decompressobj()
    try:
        text = inflater.decompress(base64.b64decode(packed, validate=True), SHARD_MAX_TEXT_BYTES)
    except binascii.Error as e:
        raise ValueError(f"{name}: {e}") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"{name} is truncated or inflates past {SHARD_MAX_TEXT_BYTES} bytes")
    entries = _entries(api_json.loads(text))
    # Each key in the shard it hashes to, so no key is in two.
    strays = [key for key in entries if shard_of(key) != shard]
    if strays:
        raise ValueError(f"{name} holds entries of another shard: {', '.join(strays[:3])}")
    return entries


def entries_of(obj: Mapping[str, Any] | None) -> dict[str, Entry]:
    """The entries of a stored ledger ({} for none); DamagedLedger when unreadable."""
    return dict(ledger_of(obj).entries) if obj else {}


def ledger_object(
    ledger_namespace: str,
    namespace: str,
    ledger: Ledger,
    resource_version: str | None,
    *,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": ledger_name(namespace),
        "namespace": ledger_namespace,
        "labels": {
            "app.kubernetes.io/managed-by": "priogate",
            LEDGER_LABEL[0]: LEDGER_LABEL[1],
            COVERS_LABEL: namespace,
        },
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if resource_version:
        meta["resourceVersion"] = resource_version
    charges = {key: c.to_json() for key, c in sorted(ledger.charges.items())}
    data = {
        LEDGER_DATA_KEY: SHARDED_MARKER,
        CHARGES_DATA_KEY: json.dumps(charges, separators=(",", ":"), sort_keys=True),
    }
    if ledger.fences:
        fences = [f.to_json() for _, f in sorted(ledger.fences.items())]
        data[FENCES_DATA_KEY] = json.dumps(fences, separators=(",", ":"), sort_keys=True)
    data.update(_packed_shards(meta["name"], ledger.entries))
    size = stored_size({"data": data})
    if size > CONFIGMAP_MAX_BYTES:
        raise LedgerFull(
            f"the ledger of namespace {namespace} would hold {len(ledger.entries)} "
            f"PodGroup reservations in about {size} bytes, more than a ConfigMap holds "
            f"({CONFIGMAP_MAX_BYTES}); delete PodGroups that are no longer needed"
        )
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def stored_size(obj: Mapping[str, Any]) -> int:
    """The bytes of a ConfigMap that kube-apiserver counts against CONFIGMAP_MAX_BYTES: its data
    values and its binaryData decoded (the API carries those base64-encoded)."""
    text = sum(len(v.encode()) for v in (obj.get("data") or {}).values())
    binary = sum(len(v) * 3 // 4 - v[-2:].count("=") for v in (obj.get("binaryData") or {}).values())
    return text + binary


def _packed_shards(ledger: str, entries: Mapping[str, Entry]) -> dict[str, str]:
    by_shard: dict[int, list[str]] = {}
    for key in sorted(entries):
        by_shard.setdefault(shard_of(key), []).append(key)
    out: dict[str, str] = {}
    for shard, keys in sorted(by_shard.items()):
        # Compared element by element, which is by identity first: a turn's ledger holds the
        # same Entry objects as the last for every entry it did not change.
        pairs = tuple((key, entries[key]) for key in keys)
        last = _WRITTEN.get((ledger, shard))
        if last is not None and last[0] == pairs:
            packed = last[1]
        else:
            # What json.dumps(..., sort_keys=True) writes for the shard, from each entry's text.
            text = f"{{{','.join(f'{json.dumps(key)}:{entry.json_text}' for key, entry in pairs)}}}"
            packed = base64.b64encode(zlib.compress(text.encode(), COMPRESSION_LEVEL)).decode()
            _keep(_WRITTEN, (ledger, shard), (pairs, packed))
            # The next GET most likely returns this value: its entries are known already.
            _keep(_READ, (ledger, shard), (packed, {key: entries[key] for key in keys}))
        out[shard_key(shard)] = packed
    return out
