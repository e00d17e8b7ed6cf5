"""The ledgers kept in this process, for a server without an API server (offline mode, the
decision benchmark) and in-process tests: the same turn contract as priogate.kube.ledger_store,
one turn at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE
from priogate.ledger.model import Decide, Ledger, Reads
from priogate.ledger.settlement import resync


class MemoryLedgerStore:
    """`reads` gives a namespace's reads (the caller's caches stand in for quorum reads)."""

    def __init__(
        self, reads: Callable[[str], Reads] | None = None, ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE
    ) -> None:
        self.ledger_namespace = ledger_namespace
        self._lock = threading.Lock()
        self.ledgers: dict[str, Ledger] = {}
        self.writes = 0
        self.reads = reads

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
            current = self.ledgers.get(namespace)
            if current is None:
                current = Ledger(resync({}, reads.podgroups()))
            new, result = decide(current, reads)
            if new is not None and not dry_run:
                self.ledgers[namespace] = new
                self.writes += 1
            return result
