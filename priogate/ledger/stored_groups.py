"""The truth behind a ledger: the namespace's stored PodGroups, each as the claim it
makes (priogate.ledger.model's Entry), from a quorum LIST or a watch cache."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from priogate import podgroup
from priogate.ledger.model import (
    Entry,
    Listing,
    count_field,
    memo_key,
    memoized,
    normalize,
    stamp,
    text_field,
)


def entry_of_group(group: Mapping[str, Any], admitted_at: str) -> Entry:
    """The claim a stored (or admitted) PodGroup makes; ValueError when its spec is unreadable.
    Parsed once per content (the caches hand the same objects to every admission and reconcile)."""
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    raw = {
        "group": meta.get("name"),
        "minMember": spec.get("minMember"),
        "priorityClassName": spec.get("priorityClassName"),
        "admittedAt": admitted_at,
        "generation": meta.get("generation"),
        "minResources": spec.get("minResources"),
    }
    key = memo_key(f"stored:{meta.get('uid')!r}", raw)
    return memoized(key, lambda: _parse_group(meta, spec, admitted_at))


def _parse_group(meta: Mapping[str, Any], spec: Mapping[str, Any], admitted_at: str) -> Entry:
    min_member = spec.get("minMember")
    if min_member is None:
        min_member = podgroup.DEFAULT_MIN_MEMBER
    if not isinstance(min_member, int) or isinstance(min_member, bool) or min_member < 0:
        raise ValueError(f"minMember must be 0 or more, not {min_member!r}")
    try:
        min_resources = normalize(spec.get("minResources") or {})
    except ValueError as e:
        raise ValueError(f"minResources: {e}") from None
    return Entry(
        group=text_field(meta.get("name")),
        uid=text_field(meta.get("uid")),
        min_resources=min_resources,
        min_member=min_member,
        priority_class=text_field(spec.get("priorityClassName")),
        admitted_at=admitted_at,
        generation=count_field(meta.get("generation")),
    )


# A stored group as parsed: the object, and its claim (None: its spec is unreadable).
ParsedGroup = tuple[Mapping[str, Any], Entry | None]


def parse_groups(items: Iterable[Mapping[str, Any]], admitted_at: str) -> dict[str, ParsedGroup]:
    """name -> each group parsed."""
    out: dict[str, ParsedGroup] = {}
    for item in items:
        name = text_field((item.get("metadata") or {}).get("name"))
        try:
            out[name] = (item, entry_of_group(item, admitted_at))
        except (ValueError, TypeError):
            out[name] = (item, None)
    return out


def claims_by_uid(parsed: Mapping[str, ParsedGroup]) -> dict[str, Entry]:
    return {entry.uid: entry for _, entry in parsed.values() if entry is not None and entry.uid}


def listing_of(items: Iterable[Mapping[str, Any]], started: dt.datetime) -> Listing:
    parsed = parse_groups(items, stamp(started))
    unreadable = tuple(name for name, (_, entry) in parsed.items() if entry is None)
    return Listing(claims_by_uid(parsed), started, unreadable)
