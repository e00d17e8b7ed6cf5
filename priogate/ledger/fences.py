"""Quota fences: a ResourceQuota change written into its namespace's ledger before
kube-apiserver stores it, so that every PodGroup decision taken after the change is limited by
it, however far behind a replica's quota cache is.

A PodGroup admission must be decided against the quotas as they were at some moment after its
request arrived: a quota created or lowered before that limits it. The cache alone cannot prove
that, and a quorum LIST of an idle kind waits for etcd's next progress notification (up to
100 ms, KEP-2340) on every admission. Instead the quota hook (webhook.rules.quota_fence) takes a
turn on the ledger for every quota change it admits, so the change reaches the ledger before it
can reach storage, and a decision's turn on the ledger sees it: a decision counts the cached
quotas and, as further quotas, the spec of every fence still live.

A decision counts a fence until its own cache shows what became of the change, then that cache
alone decides (a raise counts as soon as the cache has it):

- an update of the version `base` is superseded once the cache shows the quota (the same
  object, by uid) at a later resourceVersion: a change is stored as the version right after its
  base or not at all (kube-apiserver checks the precondition, or admits it again on the newer
  object, before storing: k8s.io/apiserver registry/generic/registry/store.go Update);
- a create (no base) is superseded once the cache shows the object;
- past the in-flight bound (a change is stored within it, if at all: priogate.ledger.model's
  IN_FLIGHT), a fence whose end the cache does not show counts only while a quorum read
  of its quota says the change may have been stored (stored_keeps): one refused after the hook
  (by a later admission step, or storage), or an AdmissionReview forged to the webhook, stops
  counting then;
- any fence expires FENCE_TTL after it was written, and the ledger drops it: kube-apiserver
  gives up on a request well within that time (--request-timeout, 60 s by default), and a
  replica's cache that lags by more is stale.

Every rule errs towards counting a fence: unknown uid, versions that do not compare (KEP-5504
makes them comparable integers), a quota the cache lacks. Two fences of one quota both count,
so changes admitted in one order and stored in the other never loosen a decision. A ledger keeps
every fence until it expires: one replica's cache having seen the end of a change says nothing
of another's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from priogate.clock import parse_time
from priogate.ledger.timing import FENCE_TTL
from priogate.quota import hard_limits

if TYPE_CHECKING:  # the ledger holds fences: these name it only in annotations
    from priogate.ledger.model import Ledger, Reads
    from priogate.ledger.outcome import Clock, Outcome


@dataclass(frozen=True)
class QuotaFence:
    quota: str  # the ResourceQuota's name
    uid: str  # its metadata.uid ("" when unknown: counted until it expires)
    base: str  # the resourceVersion the change applies to; "" for a create
    spec: Mapping[str, Any]  # the spec it was admitted with
    at: str  # when it was written (ledger.stamp)

    @property
    def key(self) -> str:
        """Two changes of one version are two fences, however they were admitted or stored."""
        spec = hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.quota}/{self.uid}/{self.base}/{spec}"

    def as_quota(self, namespace: str) -> dict[str, Any]:
        """The ResourceQuota the fence stands for, as a decision counts it."""
        return {"metadata": {"name": self.quota, "namespace": namespace, "uid": self.uid}, "spec": self.spec}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> QuotaFence:
        """ValueError or TypeError for anything priogate did not write."""
        if not isinstance(raw, Mapping):
            raise TypeError("quota fence is not an object")
        fields = {name: raw.get(name) for name in ("quota", "uid", "base", "at")}
        if not all(isinstance(value, str) for value in fields.values()) or not fields["quota"]:
            raise TypeError(f"quota fence fields are not strings: {sorted(fields)}")
        spec = raw.get("spec")
        if not isinstance(spec, Mapping):
            raise TypeError("quota fence spec is not an object")
        fence = cls(spec=spec, **fields)  # type: ignore[arg-type]
        parse_time(fence.at)
        hard_limits(fence.as_quota(""))  # raises for a quantity that does not parse
        return fence


def fence_of(quota: Mapping[str, Any], old: Mapping[str, Any] | None, at: str) -> QuotaFence:
    """The fence of a quota CREATE (`old` None) or UPDATE as admitted."""
    meta = quota.get("metadata") or {}
    base = str((old.get("metadata") or {}).get("resourceVersion") or "") if old is not None else ""
    return QuotaFence(
        quota=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        base=base,
        spec=dict(quota.get("spec") or {}),
        at=at,
    )


def seeded(listed: Iterable[Mapping[str, Any]], at: str) -> dict[str, QuotaFence]:
    """Fences standing for quotas a quorum LIST returned (a ledger rebuilt without its fences):
    each counts until the cache shows its quota at that version or later."""
    fences = {}
    for quota in listed:
        meta = quota.get("metadata") or {}
        # Superseded by a later version; the listed version itself is what the fence holds.
        fence = fence_of(quota, {"metadata": {"resourceVersion": _before(meta.get("resourceVersion"))}}, at)
        fences[fence.key] = fence
    return fences


def _before(version: Any) -> str:
    """The version just before `version`, so the cache showing `version` supersedes a fence of
    it (one that does not compare when `version` is not an integer: the fence then counts
    until it expires)."""
    try:
        return str(int(version) - 1)
    except (TypeError, ValueError):
        return "unknown"


def is_live(fence: QuotaFence, cached: Mapping[str, Mapping[str, Any]], now: dt.datetime) -> bool:
    """Whether a decision counts the fence: the cache (quota name -> object) does not show what
    became of its change yet, and it has not expired."""
    if _expired(fence, now):
        return False
    meta = (cached.get(fence.quota) or {}).get("metadata") or {}
    if not meta or not fence.uid or meta.get("uid") != fence.uid:
        return True
    if not fence.base:
        return False  # a create, and the cache shows the object
    return _past_base(meta, fence) is not True


def unexpired(fences: Mapping[str, QuotaFence], now: dt.datetime) -> dict[str, QuotaFence]:
    """The fences a ledger keeps: every one younger than FENCE_TTL. Not fewer: that this
    replica's cache has seen what became of a change says nothing of another replica's cache,
    which may still need the fence."""
    return {key: fence for key, fence in fences.items() if not _expired(fence, now)}


def _expired(fence: QuotaFence, now: dt.datetime) -> bool:
    return _older_than(fence, now, FENCE_TTL)


def _by_name(quotas: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str((q.get("metadata") or {}).get("name") or ""): q for q in quotas}


def stored_keeps(fence: QuotaFence, stored: Mapping[str, Any] | None) -> bool:
    """Whether a fence past the in-flight bound, whose end the cache does not show, still
    counts by the quota as a quorum read returns it: only if its change may have been stored
    (the cache is then behind). A change stored at all is stored within the bound, so a
    fence whose quota is gone, another object, or still at the version the change applied to
    stood for a change refused after the hook, or for an AdmissionReview forged to the
    webhook's URL: it counts no more."""
    meta = (stored or {}).get("metadata") or {}
    if not meta or (fence.uid and meta.get("uid") != fence.uid):
        return False
    if not fence.base:
        return True  # a create, stored: the cache is behind
    return _past_base(meta, fence) is not False


def _past_base(meta: Mapping[str, Any], fence: QuotaFence) -> bool | None:
    """Whether the object's resourceVersion is newer than the version the fence's change applies
    to; None when the two do not compare (every caller then counts the fence)."""
    try:
        return int(meta.get("resourceVersion")) > int(fence.base)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def live_fences(
    fences: Mapping[str, QuotaFence],
    cached: Iterable[Mapping[str, Any]],
    now: dt.datetime,
    bound: dt.timedelta | None = None,
    stored: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> dict[str, QuotaFence]:
    """The fences a decision counts (is_live); with `bound` (the in-flight bound) and `stored`
    (a quorum read of a quota by name), those older than the bound only if stored_keeps."""
    by_name = _by_name(cached)
    live = {}
    for key, fence in fences.items():
        if not is_live(fence, by_name, now):
            continue
        past_bound = bound is not None and _older_than(fence, now, bound)
        if past_bound and stored is not None and not stored_keeps(fence, stored(fence.quota)):
            continue
        live[key] = fence
    return live


def _older_than(fence: QuotaFence, now: dt.datetime, age: dt.timedelta) -> bool:
    try:
        return now - parse_time(fence.at) > age
    except ValueError:
        return False


def limiting_quotas(
    namespace: str,
    cached: list[Mapping[str, Any]],
    fences: Mapping[str, QuotaFence],
    now: dt.datetime,
    bound: dt.timedelta | None = None,
    stored: Callable[[str], Mapping[str, Any] | None] | None = None,
) -> list[Mapping[str, Any]]:
    """What a PodGroup decision counts: the cached quotas and every live fence as a quota of its
    own (a claim must fit both the spec the cache shows and the spec on its way)."""
    live = live_fences(fences, cached, now, bound, stored)
    if not live:
        return cached
    return [*cached, *(fence.as_quota(namespace) for _, fence in sorted(live.items()))]


def decide(ledger: Ledger, reads: Reads, clock: Clock, fence: QuotaFence) -> tuple[Ledger | None, Outcome]:
    """The quota fence turn: the ledger with `fence` (a quota change kube-apiserver may store next)
    and without the expired fences; never refused. No others are dropped, since a replica whose
    cache is behind may still need them."""
    kept = unexpired(ledger.fences, clock())
    kept[fence.key] = fence
    return ledger.with_fences(kept), None
