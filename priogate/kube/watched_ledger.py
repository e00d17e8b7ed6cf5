"""The ledgers as this process's watch shows them, as the copy a ledger turn starts
from instead of a GET (priogate/ledger/turn_order.py says when a turn may, and why that is safe).

The process's note of its last write on each namespace's ledger is kept here: a quota server runs
one worker process (docs/serving.md), so nobody else writes under its name.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

from priogate.kube.cache import WatchCache
from priogate.ledger.codec import ledger_name
from priogate.ledger.timing import OTHERS_ACTIVE_SECONDS, WATCH_WAIT_SECONDS, WRITER_FRESH_SECONDS
from priogate.ledger.turn_order import Start, Turn, peer_of, start_from, turn_holder, turn_of, writer_name


class WatchedLedgers:
    def __init__(
        self,
        cache: WatchCache,
        ledger_namespace: str,
        writer: str | None = None,
        peer_address: str | None = None,
    ) -> None:
        """`writer` names this process's writes in their turn stamps: by default its peer
        address (where other replicas reach it, if it has one), the host, the process and a
        random part, so a restarted process never takes an old stamp for its own."""
        self.cache = cache
        self.ledger_namespace = ledger_namespace
        process = f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.writer = writer or writer_name(process, peer_address)
        # namespace -> (the ledger's uid, the sequence number) of this process's last write
        self._last: dict[str, tuple[str, int]] = {}
        # namespace -> writer -> (its latest sequence number seen, time.monotonic() first seen),
        # this process's own writes included: whether another writer is busy, and who holds the
        # turn (turn_order.turn_holder)
        self._writers: dict[str, dict[str, tuple[int, float]]] = {}
        # namespace -> time.monotonic() of this process's last write on its ledger
        self._wrote: dict[str, float] = {}

    def start_copy(self, namespace: str, deadline: float) -> tuple[Mapping[str, Any], Turn] | None:
        """The watch's copy of the namespace's ledger and its stamp, to start a turn from, or
        None: start from a GET. Waits for the watch at most WATCH_WAIT_SECONDS, and never past
        `deadline` (time.monotonic())."""
        if not self.cache.synced:
            return None  # a watch that may be behind would only cost a wait and a lost write
        uid, seq = self.last_written(namespace)
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
        """Whether another writer's stamp appeared within OTHERS_ACTIVE_SECONDS."""
        self._note_writer(namespace, turn, now)
        return any(
            writer != self.writer and now - when < OTHERS_ACTIVE_SECONDS
            for writer, (_, when) in self._writers.get(namespace, {}).items()
        )

    def writer_of(self, namespace: str) -> tuple[str, int] | None:
        """The peer address (host, port) of the process holding the namespace's ledger turn, when
        that is another process that names an address (turn_order.turn_holder: of the writers the
        watch showed writing within WRITER_FRESH_SECONDS, the least by name). None when it is this
        process, when nobody wrote lately, or when the watch is not current."""
        if not self.cache.synced:
            return None
        holder = self._holder(namespace, time.monotonic())
        if holder is None or holder == self.writer:
            return None
        return peer_of(holder)

    def _holder(self, namespace: str, now: float) -> str | None:
        """turn_order.turn_holder of the writers seen, the writer of the watch's copy included."""
        obj = self.cache.get(self.ledger_namespace, ledger_name(namespace))
        if obj is not None:
            self._note_writer(namespace, turn_of(obj), now)
        seen = {w: when for w, (_, when) in self._writers.get(namespace, {}).items()}
        return turn_holder(seen, now, WRITER_FRESH_SECONDS)

    def holds_a_turn(self) -> bool:
        """Whether this process holds some namespace's ledger turn now: of the ledgers it wrote
        within WRITER_FRESH_SECONDS, one whose turn holder it still is. Then kube-apiserver's
        connections to it carry admissions it decides itself, and are kept
        (webhook/ledger_relay.py, LedgerRelay.sheds_connections)."""
        now = time.monotonic()
        for namespace, when in list(self._wrote.items()):
            if now - when > WRITER_FRESH_SECONDS:
                self._wrote.pop(namespace, None)
            elif self._holder(namespace, now) == self.writer:
                return True
        return False

    def _note_writer(self, namespace: str, turn: Turn, now: float) -> None:
        if not turn.writer:
            return
        writers = self._writers.setdefault(namespace, {})
        seen = writers.get(turn.writer)
        if seen is None or seen[0] != turn.seq:
            writers[turn.writer] = (turn.seq, now)
            for writer, (_, when) in list(writers.items()):
                if now - when > WRITER_FRESH_SECONDS:
                    del writers[writer]  # a replica gone, or a restarted process's old name

    def last_written(self, namespace: str) -> tuple[str, int]:
        """(the ledger's uid, the sequence number) of this process's last write on the
        namespace's ledger; ("", -1) when it wrote none."""
        return self._last.get(namespace, ("", -1))

    def written(self, namespace: str, stored: Mapping[str, Any], turn: Turn) -> None:
        """Note a write that landed (`stored`: kube-apiserver's answer), holding the namespace's
        turn in this process."""
        self._last[namespace] = ((stored.get("metadata") or {}).get("uid", ""), turn.seq)
        now = time.monotonic()
        self._note_writer(namespace, turn, now)
        self._wrote[namespace] = now
