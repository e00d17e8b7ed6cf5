"""The ledgers' sweep: each ledger made true to its namespace's stored PodGroups.

priogate.ledger.settlement.resync decides (drop entries whose group a quorum LIST does not hold once they
are no longer in flight; set an entry to the stored spec after a shrinking or refused update;
adopt a stored group the ledger lacks; rebuild a missing or damaged ledger);
priogate/kube/ledger_store.LedgerStore reads the truth with a quorum LIST and writes with the
resourceVersion read, deciding again on a 409, so a reservation the webhook adds meanwhile is
never lost. The caches only tell which namespaces may have something to do, so a sweep where
the caches agree with the ledger costs no API call.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import structlog

from controller.caches import Caches
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger.codec import covered_namespace, ledger_name, ledger_of
from priogate.ledger.model import DamagedLedger, Entry, Ledger, Reads
from priogate.ledger.settlement import in_flight, live_charges, resync
from priogate.ledger.stored_groups import entry_of_group
from priogate.ledger.timing import IN_FLIGHT

log = structlog.get_logger("priogate.controller.reclaim")


@dataclass
class SweepResult:
    dropped: list[str] = field(default_factory=list)  # group names whose entries ended
    adopted: list[str] = field(default_factory=list)
    resynced: list[str] = field(default_factory=list)  # entries set to the stored spec
    recheck_after: float | None = None  # seconds until an entry in flight should be looked at again

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.adopted or self.resynced)


def _cached_claims(groups: Mapping[str, Mapping]) -> dict[str, Entry]:
    out = {}
    for group in groups.values():
        try:
            entry = entry_of_group(group, "")
        except (ValueError, TypeError):
            continue
        out[entry.uid] = entry
    return out


class Reclaimer:
    def __init__(
        self,
        store: LedgerStore,
        caches: Caches,
        in_flight: dt.timedelta = IN_FLIGHT,
    ) -> None:
        self.store = store
        self.caches = caches
        self.in_flight = in_flight

    def namespaces(self) -> list[str]:
        """Namespaces with a ledger or with stored PodGroups (a missing ledger is rebuilt)."""
        covered = {covered_namespace(c) for c in self.caches.ledgers.items()}
        with_groups = {(g.get("metadata") or {}).get("namespace", "") for g in self.caches.podgroups.items()}
        return sorted((covered | with_groups) - {""})

    def _needs_work(self, namespace: str, now: dt.datetime) -> tuple[bool, float | None]:
        """(whether the caches disagree with the ledger, seconds until an entry in flight ends)."""
        cached = self.caches.ledgers.get(self.store.ledger_namespace, ledger_name(namespace))
        groups = _cached_claims(self.caches.podgroups.namespace(namespace))
        if cached is None:
            return bool(groups), None
        try:
            ledger = ledger_of(cached)
        except DamagedLedger:
            return True, None
        recheck: float | None = None
        work = False
        for entry in ledger.entries.values():
            stored = groups.get(entry.uid)
            if in_flight(entry, now, self.in_flight):
                if stored is None or not stored.same_claim(entry):
                    left = self.in_flight.total_seconds() - (now - entry.admitted).total_seconds()
                    recheck = max(0.5, left + 0.5) if recheck is None else min(recheck, max(0.5, left + 0.5))
                continue
            if stored is None or not stored.same_claim(entry):
                work = True
        uids = {e.uid for e in ledger.entries.values()}
        if any(uid not in uids for uid in groups):
            work = True
        if len(live_charges(ledger.charges, now, None, self.in_flight)) != len(ledger.charges):
            work = True
        return work, recheck

    def reclaim(self, namespace: str, now: dt.datetime | None = None) -> SweepResult:
        now = now or dt.datetime.now(dt.UTC)
        work, recheck = self._needs_work(namespace, now)
        result = SweepResult(recheck_after=recheck)
        if not work:
            return result

        def make_true(ledger: Ledger, reads: Reads) -> tuple[Ledger | None, SweepResult]:
            entries = resync(ledger.entries, reads.podgroups(), self.in_flight)
            charges = live_charges(ledger.charges, now, None, self.in_flight)
            before = dict(ledger.entries)
            outcome = SweepResult(recheck_after=recheck)
            outcome.dropped = sorted(e.group for k, e in before.items() if k not in entries)
            outcome.adopted = sorted(e.group for k, e in entries.items() if k not in before)
            outcome.resynced = sorted(
                e.group for k, e in entries.items() if k in before and not before[k].same_claim(e)
            )
            if entries == before and charges == dict(ledger.charges):
                return None, outcome
            return replace(ledger, entries=entries, charges=charges), outcome  # fences kept

        result = self.store.update(namespace, make_true)
        if result.changed:
            log.info(
                "ledger made true to the stored PodGroups",
                namespace=namespace,
                dropped=result.dropped,
                adopted=result.adopted,
                resynced=result.resynced,
            )
        return result
