"""The ledger: which PodGroups hold a reservation in a tenant namespace, and which
pods were admitted there a moment ago, as plain data and pure decisions.

Where it lives: one ConfigMap per tenant namespace, in priogate's own namespace
(`priogate-system/podgroup-ledger.<namespace>`), where only priogate may write. Nothing a
tenant can write decides a reservation. priogate/kube/ledger_store.py reads and writes it with
optimistic concurrency; this module holds its entries and charges, priogate/ledger/codec.py
reads and writes its ConfigMap, priogate/ledger/settlement.py rebuilds it from the stored
PodGroups and decides which entries still count.

What it is: a cache of the truth, never the truth itself. The truth is the set of stored
PodGroups (read with a quorum LIST); the ledger adds only what the API server cannot tell yet:
groups admitted but not yet stored (in flight), and pods admitted but not yet charged in a
quota's status.used. So a missing or damaged ledger is rebuilt from a quorum LIST, an entry
whose group a quorum LIST does not hold is dropped once it is older than the in-flight bound,
and an entry is set to the stored spec once no update of it can still be in flight.

A ConfigMap rather than a custom resource because every admission rewrites it: a built-in
type's read-modify-write is several times cheaper than a CRD object's, whose managedFields grow
with every entry (docs/ledger.md has the measurement).
"""

from __future__ import annotations

import datetime as dt
import json
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import cached_property
from types import MappingProxyType
from typing import Any, Protocol

from priogate.clock import micro_time, parse_time
from priogate.ledger.fences import QuotaFence
from priogate.quota import Reservation, positive_nanos, quota_names
from priogate.resources import ResourceList, format_quantity, parse_resource_list

# The key suffix of the claim a group held under its previous class while a class change is in
# flight: either object may end up stored, so both claims count until one is.
SHADOW_SUFFIX = "/previous"


class DamagedLedger(ValueError):
    """The ledger exists but is not one priogate wrote; it is rebuilt, never guessed at."""


@dataclass(frozen=True)
class Entry:
    """One PodGroup's claim, keyed by its uid, never its name: two creates of one name (one of
    which storage refuses) hold two entries until the loser is confirmed absent. Too much is
    reserved for a moment; never too little."""

    group: str
    uid: str
    min_resources: Mapping[str, str]  # normalized quantity strings, as stored
    min_member: int
    priority_class: str
    admitted_at: str  # stamp(): when the last admission that raised this claim decided it
    # metadata.generation of the object that claim came from (0: unknown). kube-apiserver sets a
    # custom resource's generation before validating admission (registry/rest BeforeCreate and
    # BeforeUpdate run first; apiextensions-apiserver's strategy bumps it on a spec change), so
    # a stored object of this generation or later means that admission is no longer in flight.
    generation: int = 0

    @property
    def key(self) -> str:
        return self.uid or f"name:{self.group}"

    def as_shadow(self) -> tuple[str, Entry]:
        return f"{self.uid}{SHADOW_SUFFIX}", self

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "minResources": dict(self.min_resources),
            "minMember": self.min_member,
            "priorityClassName": self.priority_class,
            "admittedAt": self.admitted_at,
            "generation": self.generation,
        }

    @cached_property
    def json_text(self) -> str:
        """to_json() as the ledger stores it: a ledger is written whole on every admission, and
        only its new entries need encoding."""
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    def written_as(self, raw: Mapping[str, Any]) -> bool:
        """Whether `raw` is what to_json() writes for this entry, types included (== alone would
        let true or 1.0 pass for a count of 1)."""
        return (
            len(raw) == 6
            and raw.get("admittedAt") == self.admitted_at
            and raw.get("group") == self.group
            and raw.get("priorityClassName") == self.priority_class
            and raw.get("minResources") == self.min_resources
            and type(count := raw.get("minMember")) is int
            and count == self.min_member
            and type(generation := raw.get("generation")) is int
            and generation == self.generation
        )

    @classmethod
    def from_json(cls, key: str, raw: Mapping[str, Any]) -> Entry:
        if not isinstance(raw, Mapping):
            raise TypeError(f"entry {key} is not an object")
        # A ledger read again holds mostly the entries its last read held: comparing the raw
        # entry field by field with the one parsed last for its key is several times cheaper
        # than building the memo key.
        last = _LAST_BY_KEY.get(key)
        if last is not None and last.written_as(raw):
            return last
        entry = memoized(memo_key(key, raw), lambda: cls._parse(key, raw))
        if len(_LAST_BY_KEY) >= _ENTRIES_KEPT:
            _LAST_BY_KEY.clear()
        _LAST_BY_KEY[key] = entry
        return entry

    @classmethod
    def _parse(cls, key: str, raw: Mapping[str, Any]) -> Entry:
        entry = cls(
            group=text_field(raw.get("group")),
            uid="" if key.startswith("name:") else key.removesuffix(SHADOW_SUFFIX),
            min_resources=normalize(raw.get("minResources") or {}),
            min_member=count_field(raw.get("minMember")),
            priority_class=text_field(raw.get("priorityClassName")),
            admitted_at=text_field(raw.get("admittedAt")),
            generation=count_field(raw.get("generation")),
        )
        parse_time(entry.admitted_at)
        return entry

    def reservation(self) -> Reservation:
        return self._reservation

    @cached_property
    def _reservation(self) -> Reservation:
        # Parsed once per entry: a decision sums every entry of the namespace's ledger.
        requests = parse_resource_list(self.min_resources, context=f"reservation of {self.group}")
        return Reservation(self.group, self.priority_class, quota_names(requests, self.min_member))

    def positive_nanos(self) -> Mapping[str, int | Fraction]:
        """quota.positive_nanos of the reservation: what the running sums move by this entry."""
        return self._positive_nanos

    @cached_property
    def _positive_nanos(self) -> Mapping[str, int | Fraction]:
        # Once per entry, as the reservation: every watch event and turn moves sums by it.
        return MappingProxyType(positive_nanos(self.reservation()))

    @cached_property
    def admitted(self) -> dt.datetime:
        """admitted_at as a time; the earliest time for a stamp that does not parse (an entry read
        from a ledger has one that parses): such a claim counts as old. Parsed once per entry:
        a refusal judges every entry of the ledger by it."""
        try:
            return parse_time(self.admitted_at)
        except ValueError:
            return dt.datetime.min.replace(tzinfo=dt.UTC)

    def same_claim(self, other: Entry) -> bool:
        return (
            self.key == other.key
            and self.min_member == other.min_member
            and self.priority_class == other.priority_class
            and dict(self.min_resources) == dict(other.min_resources)
        )

    def covers(self, other: Entry) -> bool:
        """This claim is at least `other`'s: same class, no amount smaller."""
        if self.priority_class != other.priority_class or self.min_member < other.min_member:
            return False
        mine = parse_resource_list(self.min_resources)
        return all(
            mine.get(name, 0) >= amount for name, amount in parse_resource_list(other.min_resources).items()
        )


# Parsed entries by their raw JSON: every admission reads the whole ledger again, and between
# two reads only the entries just admitted or ended change. Bounded; cleared when full.
_ENTRIES: dict[tuple[Any, ...], Entry] = {}
_ENTRIES_KEPT = 50_000
# The entry last parsed for each ledger key (Entry.from_json). Bounded the same way.
_LAST_BY_KEY: dict[str, Entry] = {}


def memoized(content: tuple[Any, ...] | None, parse: Callable[[], Entry]) -> Entry:
    """The Entry parsed last for `content` (a memo_key(); None: never kept), else parse()'s."""
    known = _ENTRIES.get(content) if content is not None else None
    if known is not None:
        return known
    entry = parse()  # raises for a bad entry: nothing is kept then
    if content is not None:
        if len(_ENTRIES) >= _ENTRIES_KEPT:
            _ENTRIES.clear()
        _ENTRIES[content] = entry
    return entry


def memo_key(key: str, raw: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A hashable copy of a raw entry, with each value's type (True must not pass for 1), or
    None for one that has none (its parse then raises, as it must)."""
    try:
        amounts = raw.get("minResources") or {}
        fields = tuple(
            (type(value), value)
            for value in (
                raw.get("group"),
                raw.get("minMember"),
                raw.get("priorityClassName"),
                raw.get("admittedAt"),
                raw.get("generation"),
            )
        )
        memo = (key, fields, tuple(sorted((n, type(q), q) for n, q in amounts.items())))
        hash(memo)
    except (TypeError, AttributeError):
        return None
    return memo


@dataclass(frozen=True)
class Charge:
    """A pod admitted (or resized) in a namespace with live reservations, whose request the
    quota's status.used may not show yet: kube-apiserver's ResourceQuota plugin charges it only
    after the webhooks (plugin/pkg/admission/resourcequota controller.go). Counted as used until
    the pod is seen stored or the in-flight bound passes."""

    pod: str
    pod_uid: str
    group: str  # the pod's PodGroup, "" for a plain pod
    demand: Mapping[str, str]  # quota names -> normalized quantity
    charged_at: str  # stamp()

    def amounts(self) -> ResourceList:
        return parse_resource_list(self.demand, context=f"charge of pod {self.pod}")

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "podUID": self.pod_uid,
            "group": self.group,
            "demand": dict(self.demand),
            "chargedAt": self.charged_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Charge:
        if not isinstance(raw, Mapping):
            raise TypeError("charge is not an object")
        charge = cls(
            pod=text_field(raw.get("pod")),
            pod_uid=text_field(raw.get("podUID")),
            group=text_field(raw.get("group")),
            demand=normalize(raw.get("demand") or {}),
            charged_at=text_field(raw.get("chargedAt")),
        )
        parse_time(charge.charged_at)
        return charge


@dataclass(frozen=True)
class Ledger:
    """A ledger's contents. Its maps are never changed in place: a turn makes a new Ledger."""

    entries: Mapping[str, Entry] = field(default_factory=dict)
    charges: Mapping[str, Charge] = field(default_factory=dict)  # by admission request uid
    fences: Mapping[str, QuotaFence] = field(default_factory=dict)  # by QuotaFence.key
    # The ledger these entries were made from (weakly held: no chain of every ledger a turn
    # made) and the keys whose entries differ from its, when known (updated()): the running
    # sums then move by those entries alone (priogate.ledger.totals). Not part of its value.
    origin: tuple[weakref.ref[Ledger], frozenset[str]] | None = field(default=None, compare=False, repr=False)

    def with_entries(self, entries: Mapping[str, Entry]) -> Ledger:
        return replace(self, entries=dict(entries), origin=None)

    def updated(self, changes: Mapping[str, Entry | None]) -> Ledger:
        """These entries with `changes` made (None: the key removed), remembering which."""
        if not changes:
            return self
        entries = dict(self.entries)
        for key, entry in changes.items():
            if entry is None:
                entries.pop(key, None)
            else:
                entries[key] = entry
        return replace(self, entries=entries, origin=(weakref.ref(self), frozenset(changes)))

    def with_charges(self, charges: Mapping[str, Charge]) -> Ledger:
        return replace(self, charges=dict(charges))

    def with_fences(self, fences: Mapping[str, QuotaFence]) -> Ledger:
        return replace(self, fences=dict(fences))


def text_field(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def count_field(value: object) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{value!r} is not a count")
    return value


def normalize(min_resources: Mapping[str, Any]) -> dict[str, str]:
    """Parse and re-format quantities so equal amounts compare equal ("1000m" == "1")."""
    if not isinstance(min_resources, Mapping):
        raise ValueError("not a map of quantities")
    try:
        memo_key: tuple[Any, ...] | None = tuple(sorted((n, type(q), q) for n, q in min_resources.items()))
        hash(memo_key)
    except TypeError:
        memo_key = None
    known = _NORMALIZED.get(memo_key) if memo_key is not None else None
    if known is None:
        known = {name: format_quantity(q) for name, q in sorted(parse_resource_list(min_resources).items())}
        if memo_key is not None:
            if len(_NORMALIZED) >= _ENTRIES_KEPT:
                _NORMALIZED.clear()
            _NORMALIZED[memo_key] = known
    return dict(known)


# Most groups of a namespace ask for the same few amounts; parsing each again is most of the
# cost of reading a LIST of them.
_NORMALIZED: dict[tuple[Any, ...], dict[str, str]] = {}


def formatted(amounts: Mapping[str, Fraction]) -> dict[str, str]:
    return {name: format_quantity(q) for name, q in sorted(amounts.items()) if q}


def stamp(moment: dt.datetime) -> str:
    """An admission's time as the ledger keeps it: to the microsecond, because the in-flight
    bound is a few seconds and a whole-second stamp would make a claim look up to a second
    older than it is (ledgers written with whole seconds are still read)."""
    return micro_time(moment)


@dataclass(frozen=True)
class Listing:
    """The namespace's stored PodGroups from one quorum LIST, by uid, and when the LIST began."""

    groups: Mapping[str, Entry]
    started: dt.datetime
    unreadable: tuple[str, ...] = ()  # names of stored groups whose spec did not parse


class Reads(Protocol):
    """Quorum reads a decision may need, made at most once per turn (priogate.kube.ledger_store)."""

    def quotas(self) -> list[Mapping[str, Any]]: ...

    def quota(self, name: str) -> Mapping[str, Any] | None: ...

    def podgroups(self) -> Listing: ...


# decide(ledger, reads) -> (the ledger to write, or None to write nothing; the result to return)
Decide = Callable[[Ledger, Reads], tuple[Ledger | None, Any]]
