"""The ledger's ConfigMap form: entries in zlib-compressed shards, read back exactly;
any other form (one JSON text, shards in binaryData) damaged; a damaged shard never read as
empty; unchanged shards neither compressed nor parsed again; a ledger too large for a ConfigMap
refused by name."""

from __future__ import annotations

import base64
import json
import uuid
import zlib
from typing import Any

import pytest

from priogate.ledger import codec as ledger_codec
from priogate.ledger import model as ledger
from priogate.ledger.codec import (
    LEDGER_DATA_KEY,
    SHARDED_MARKER,
    SHARDS,
    LedgerFull,
    ledger_object,
    ledger_of,
    shard_key,
    shard_of,
)
from priogate.ledger.model import Entry, Ledger

T = "2026-11-22T12:00:00.000000Z"


def entries(count: int, cpu: str = "1") -> dict[str, Entry]:
    made = (Entry(f"pg-{i:05d}", str(uuid.uuid4()), {"cpu": cpu}, 1, "", T, 1) for i in range(count))
    return {e.key: e for e in made}


def stored(written: Ledger, namespace: str = "team-a") -> dict[str, Any]:
    """The ledger as a GET returns it: through JSON, with a resourceVersion."""
    return json.loads(json.dumps(ledger_object("priogate-system", namespace, written, "7")))


def pack(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode())).decode()


@pytest.mark.parametrize("count", [0, 1, 17, 400, 3000])
def test_a_ledger_reads_back_as_written(count):
    written = Ledger(entries(count))
    obj = stored(written)
    assert ledger_of(obj).entries == written.entries
    assert obj["data"][LEDGER_DATA_KEY] == SHARDED_MARKER
    assert "binaryData" not in obj  # text: kube-apiserver compares a []byte byte by byte
    assert len(text_shards(obj)) <= SHARDS and bool(text_shards(obj)) == bool(count)


def test_the_marker_is_not_json():
    # A reader that parsed this key as the entries' JSON (and a missing key as no entries) finds
    # the ledger damaged and rebuilds it from the stored groups, never reads it as empty.
    with pytest.raises(json.JSONDecodeError):
        json.loads(SHARDED_MARKER)


def ledger_in(shards: dict[int | str, str], text: str | None = None, binary: bool = False) -> dict[str, Any]:
    """A ledger ConfigMap with these shards (by number, or by key as given), in data (or, with
    `binary`, in binaryData) and, by default, the marker."""
    data: dict[str, str] = {} if text == "" else {LEDGER_DATA_KEY: SHARDED_MARKER if text is None else text}
    values = {shard_key(k) if isinstance(k, int) else k: v for k, v in shards.items()}
    obj: dict[str, Any] = {"metadata": {"name": "podgroup-ledger.team-a"}, "data": data}
    if binary:
        obj["binaryData"] = values
    else:
        data.update(values)
    return obj


def text_shards(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in obj["data"].items() if k.startswith("reservations.") and k != LEDGER_DATA_KEY}


ONE = json.dumps({"uid-1": Entry("a", "uid-1", {"cpu": "1"}, 1, "", T).to_json()})


def test_a_ledger_is_read():
    group = Entry("a", "uid-1", {"cpu": "1"}, 1, "", T)
    assert ledger_of(ledger_in({shard_of("uid-1"): pack(ONE)})).entries == {"uid-1": group}


@pytest.mark.parametrize(
    ("shards", "text", "binary", "why"),
    [
        ({0: "not base64!"}, None, False, "reservations.00"),
        ({0: base64.b64encode(b"not zlib").decode()}, None, False, ""),
        ({0: base64.b64encode(zlib.compress(ONE.encode())[:-4]).decode()}, None, False, "truncated"),
        ({0: pack("[1, 2]")}, None, False, "not a JSON object"),
        ({0: pack('{"u": 5}')}, None, False, "not an object"),
        ({(shard_of("uid-1") + 1) % SHARDS: pack(ONE)}, None, False, "another shard"),
        ({"reservations.99.json.zlib.base64": pack(ONE)}, None, False, "not a shard"),
        # Forms priogate does not write: entries as one JSON text, shards in binaryData, no marker.
        ({}, ONE, False, "does not say where the entries are"),
        ({}, "", False, "does not say where the entries are"),
        ({shard_of("uid-1"): pack(ONE)}, None, True, "binaryData is not where"),
    ],
)
def test_a_damaged_ledger_is_an_error_never_an_empty_ledger(shards, text, binary, why):
    with pytest.raises(ledger.DamagedLedger, match=f"is not a ledger.*{why}"):
        ledger_of(ledger_in(shards, text, binary))


def test_a_shard_that_inflates_past_the_bound_is_damaged(monkeypatch):
    monkeypatch.setattr(ledger_codec, "SHARD_MAX_TEXT_BYTES", 1000)
    bomb = {"uid-1": {"group": "x" * 5000}}
    obj = ledger_in({shard_of("uid-1"): pack(json.dumps(bomb))})
    with pytest.raises(ledger.DamagedLedger, match="inflates past 1000 bytes"):
        ledger_of(obj)


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls = [0]
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_only_changed_shards_are_compressed_and_parsed_again(monkeypatch):
    held = entries(200)
    ledger_of(stored(Ledger(held)))
    compressed = count_calls(monkeypatch, ledger_codec.zlib, "compress")
    parsed = count_calls(monkeypatch, ledger_codec, "_unpacked")
    new = Entry("pg-new", str(uuid.uuid4()), {"cpu": "1"}, 1, "", T)
    before = dict(ledger_codec._READ)  # what this process knew before the write below
    grown = stored(Ledger({**held, new.key: new}))
    assert compressed[0] == 1  # the new entry's shard only
    assert ledger_of(grown).entries == {**held, new.key: new}
    assert parsed[0] == 0  # what this process wrote it knows already
    # Written by another process: only the changed shard is parsed.
    ledger_codec._READ.clear()
    ledger_codec._READ.update(before)
    assert ledger_of(grown).entries == {**held, new.key: new}
    assert parsed[0] == 1


def test_the_memo_holds_one_value_per_shard_of_a_ledger():
    held = entries(300)
    for _ in range(20):
        held = {**held, **entries(1)}
        ledger_of(stored(Ledger(held), namespace="memo"))
    name = "podgroup-ledger.memo"
    assert len([k for k in ledger_codec._READ if k[0] == name]) <= SHARDS
    assert len([k for k in ledger_codec._WRITTEN if k[0] == name]) <= SHARDS


def test_a_ledger_larger_than_a_configmap_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(ledger_codec, "CONFIGMAP_MAX_BYTES", 2000)
    why = r"namespace team-a would hold 300 PodGroup reservations.*delete PodGroups"
    with pytest.raises(LedgerFull, match=why):
        ledger_object("priogate-system", "team-a", Ledger(entries(300)), None)


def test_fifteen_thousand_realistic_groups_fit_one_configmap():
    # What a ConfigMap holds of entries as a training namespace writes them (random uids,
    # several resources, microsecond stamps): one JSON text stopped at about 4,500.
    made = {}
    for i in range(15_000):
        uid = str(uuid.uuid4())
        resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8"}
        stamp = f"2026-11-22T12:{i % 60:02d}:{i * 7 % 60:02d}.{i * 7919 % 1_000_000:06d}Z"
        made[uid] = Entry(f"training-job-{i:05d}-worker", uid, resources, 8, "high-priority", stamp, 1)
    obj = ledger_object("priogate-system", "team-a", Ledger(made), None)
    assert ledger_codec.stored_size(obj) < ledger_codec.CONFIGMAP_MAX_BYTES
    assert len(",".join(e.json_text for e in made.values())) > 3 * ledger_codec.CONFIGMAP_MAX_BYTES


def test_a_shard_read_before_is_refused_under_another_shards_key():
    held = Ledger(entries(40))
    obj = stored(held)
    ledger_of(obj)  # its shards are known now
    name, packed = next(iter(text_shards(obj).items()))
    moved = shard_key((ledger_codec._SHARD_OF_KEY[name] + 1) % SHARDS)
    obj["data"] = {LEDGER_DATA_KEY: SHARDED_MARKER, moved: packed}
    with pytest.raises(ledger.DamagedLedger, match="another shard"):
        ledger_of(obj)


@pytest.mark.parametrize("length", [0, 1, 2, 3, 100, 1001])
def test_stored_size_counts_binary_data_decoded(length):
    raw = bytes(range(256)) * 4
    value = base64.b64encode(raw[:length]).decode()
    obj = {"data": {"a": "héllo"}, "binaryData": {"b": value}}
    assert ledger_codec.stored_size(obj) == len("héllo".encode()) + length
