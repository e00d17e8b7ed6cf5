"""The reservation record kept in this process, for a single-process server (offline mode,
benchmarks) and in-process tests: the same decide() contract as priogate.kube.ledger_store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from priogate.ledger import Decide, Entry, Reads, Record
from priogate.record_codec import DEFAULT_LEDGER_NAMESPACE
from priogate.settlement import resync


class MemoryLedgerStore:
    """The record kept in this process: same interface and decide() contract as the API-server
    store, for a single-process server (offline mode, benchmarks) and in-process tests. `reads`
    gives a namespace's reads (the caller's caches stand in for quorum reads)."""

    def __init__(
        self, reads: Callable[[str], Reads] | None = None, ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE
    ) -> None:
        self.ledger_namespace = ledger_namespace
        self._lock = threading.Lock()
        self.records: dict[str, Record] = {}
        self.writes = 0
        self.reads = reads

    @property
    def ledgers(self) -> MutableMapping[str, dict[str, Entry]]:
        """Each namespace's entries; setting one replaces them (tests preload a record so)."""
        return _EntriesView(self.records)

    def update(
        self,
        namespace: str,
        decide: Decide,
        *,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> Any:
        if self.reads is None:
            raise RuntimeError("MemoryLedgerStore needs reads to decide")
        reads = self.reads(namespace)
        with self._lock:
            current = self.records.get(namespace)
            if current is None:
                current = Record(resync({}, reads.podgroups()))
            new, result = decide(current, reads)
            if new is not None and not dry_run:
                self.records[namespace] = new
                self.writes += 1
            return result


class _EntriesView(MutableMapping[str, dict[str, Entry]]):
    def __init__(self, records: dict[str, Record]) -> None:
        self.records = records

    def __getitem__(self, namespace: str) -> dict[str, Entry]:
        return dict(self.records[namespace].entries)

    def __setitem__(self, namespace: str, entries: dict[str, Entry]) -> None:
        self.records[namespace] = self.records.get(namespace, Record()).with_entries(entries)

    def __delitem__(self, namespace: str) -> None:
        del self.records[namespace]

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)
