"""The ledger's authoritative copy: one ReservationLedger object per namespace, read fresh and
written with a resourceVersion precondition. Every webhook replica and worker serializes its
reservation decisions through that object, as the built-in ResourceQuota admission does through
a quota's status: a decision made on a stale read fails with 409 and is made again."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import structlog

from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.ledger import LEDGER_GROUP_VERSION, LEDGER_NAME, LEDGER_PLURAL, Entry, entries_of, ledger_object

log = structlog.get_logger("priogate.ledger")

R = TypeVar("R")
# decide(entries) -> (new entries to write, or None to write nothing; the result to return)
Decide = Callable[[dict[str, Entry]], tuple[dict[str, Entry] | None, R]]


class LedgerBusy(Exception):
    """Conflicts did not settle within the deadline; the caller should deny with 'retry'."""


class LedgerStore:
    def __init__(
        self,
        client: ApiClient,
        *,
        deadline_seconds: float = 7.0,
        on_conflict: Callable[[], None] = lambda: None,
    ):
        self.client = client
        self.deadline_seconds = deadline_seconds
        self.on_conflict = on_conflict

    def update(self, namespace: str, decide: Decide[R], *, dry_run: bool = False) -> R:
        item = resource_path(LEDGER_GROUP_VERSION, LEDGER_PLURAL, namespace, LEDGER_NAME)
        deadline = time.monotonic() + self.deadline_seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                current = self.client.get(item, timeout=(3, 5))
            except ApiError as e:
                if e.status != 404:
                    raise
                current = None
            version = (current or {}).get("metadata", {}).get("resourceVersion")
            new_entries, result = decide(entries_of(current))
            if new_entries is None or dry_run:
                return result
            body = ledger_object(namespace, new_entries, version)
            try:
                if version is None:
                    self.client.create(resource_path(LEDGER_GROUP_VERSION, LEDGER_PLURAL, namespace), body)
                else:
                    self.client.replace(item, body)
                return result
            except ApiError as e:
                if e.status != 409:
                    raise
                self.on_conflict()
            if time.monotonic() > deadline:
                raise LedgerBusy(f"ledger of namespace {namespace} kept changing ({attempt} attempts)")
            # Jittered, growing pause so contenders spread out instead of colliding again.
            time.sleep(random.uniform(0, min(0.002 * 2 ** min(attempt, 6), 0.1)))
