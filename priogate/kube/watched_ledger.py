"""The ledgers as this process's watch shows them, as the copy a ledger turn starts
from instead of a GET (priogate/turn_order.py says when a turn may, and why that is safe).

The pod's note of its last write comes from HostTurns, read and written while the pod's turn
on the namespace is held, so the worker that takes the next turn knows what its sibling wrote.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from priogate.kube.cache import WatchCache
from priogate.kube.host_turn import HostTurns
from priogate.ledger.codec import ledger_name
from priogate.ledger.timing import OTHERS_ACTIVE_SECONDS, WATCH_WAIT_SECONDS
from priogate.ledger.turn_order import Start, Turn, start_from, turn_of


class WatchedLedgers:
    def __init__(self, cache: WatchCache, ledger_namespace: str, notes: HostTurns) -> None:
        self.cache = cache
        self.ledger_namespace = ledger_namespace
        self.notes = notes
        self.writer = notes.identity
        # namespace -> (the last stamp of another writer seen, time.monotonic() it was first seen)
        self._others: dict[str, tuple[Turn, float]] = {}

    def start_copy(self, namespace: str, deadline: float) -> tuple[Mapping[str, Any], Turn] | None:
        """The watch's copy of the namespace's ledger and its stamp, to start a turn from, or
        None: start from a GET. Waits for the watch at most WATCH_WAIT_SECONDS, and never past
        `deadline` (time.monotonic())."""
        if not self.cache.synced:
            return None  # a watch that may be behind would only cost a wait and a lost write
        uid, seq = self.notes.last_written(namespace)
        give_up = min(deadline, time.monotonic() + WATCH_WAIT_SECONDS)
        while True:
            generation = self.cache.generation
            obj = self.cache.get(self.ledger_namespace, ledger_name(namespace))
            if obj is None:
                return None  # none yet, or deleted: the GET finds out, and rebuilds
            turn = turn_of(obj)
            now = time.monotonic()
            others_active = self._others_active(namespace, turn, now)
            ours = seq if (obj.get("metadata") or {}).get("uid") == uid else -1
            start = start_from(turn, ours, others_active, waited_out=now >= give_up)
            if start is Start.COPY:
                return obj, turn
            if start is Start.GET:
                return None
            self.cache.wait_changed(generation, give_up - now)

    def _others_active(self, namespace: str, turn: Turn, now: float) -> bool:
        if turn.writer and turn.writer != self.writer:
            seen = self._others.get(namespace)
            if seen is None or seen[0] != turn:
                self._others[namespace] = (turn, now)
        seen = self._others.get(namespace)
        return seen is not None and now - seen[1] < OTHERS_ACTIVE_SECONDS

    def written(self, namespace: str, stored: Mapping[str, Any], turn: Turn) -> None:
        """Note a write that landed (`stored`: kube-apiserver's answer), holding the pod's turn."""
        self.notes.note_written(namespace, (stored.get("metadata") or {}).get("uid", ""), turn.seq)
