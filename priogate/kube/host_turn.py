"""One ledger turn per namespace at a time among the worker processes of one host (a pod).

Within a process, LedgerStore batches a namespace's waiting requests into one turn. Processes
still race each other through the ledger's resourceVersion, and a lost race (409) costs a GET
and a PUT for nothing: with two gunicorn worker processes per replica, half of those races are between
processes that share a filesystem. An advisory lock (flock(2)) on a file in the pod's temporary
directory lets them take turns instead, and each turn's batch grows with what arrived while the
other held it. The lock is only an optimization: a turn that cannot have it within its deadline
goes ahead without it, and the ledger's precondition still decides every race, so a process that
hangs holding it delays nobody for long and can never make two decisions agree wrongly. The
kernel releases the lock when its holder exits.

Beside each lock, the pod keeps a note of the last write it landed on the ledger (the ledger's
uid and the turn stamp's sequence number, priogate/turn_order.py), so whichever of its workers
takes the next turn knows what the pod wrote last. Like the lock, the note only saves requests:
a missing or stale note costs a wait or a GET.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

from priogate.ledger.timing import HOST_TURN_POLL_SECONDS

log = structlog.get_logger("priogate.ledger")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class HostTurns:
    """`scope` names what the ledgers belong to (the API server and the ledger namespace), so
    servers of different clusters on one machine (tests, benchmarks) never wait for each other."""

    def __init__(self, scope: str, directory: Path | None = None) -> None:
        self.directory = directory or Path(tempfile.gettempdir()) / "priogate-ledger-turns"
        self.scope = _digest(scope)
        self.usable = True
        # The notes while the directory is not usable: then each process keeps its own.
        self._notes: dict[str, tuple[str, int]] = {}

    @property
    def identity(self) -> str:
        """Who writes, for the turn stamps: this host's processes, in this directory."""
        return _digest(f"{socket.gethostname()}:{self.directory.resolve()}:{self.scope}")[:12]

    def last_written(self, namespace: str) -> tuple[str, int]:
        """(the ledger's uid, the sequence number) of the last write the pod noted; ("", -1)
        when none is known."""
        if not self.usable:
            return self._notes.get(namespace, ("", -1))
        try:
            uid, _, seq = self._path(namespace).with_suffix(".last").read_text().partition(" ")
            return uid, int(seq)
        except (OSError, ValueError):
            return "", -1

    def note_written(self, namespace: str, uid: str, seq: int) -> None:
        """Called holding the namespace's host turn, after a write landed."""
        self._notes[namespace] = (uid, seq)
        if not self.usable:
            return
        try:
            self._path(namespace).with_suffix(".last").write_text(f"{uid} {seq}")
        except OSError as e:
            self.usable = False
            log.warning("ledger turns are not shared between worker processes", error=str(e))

    def _path(self, namespace: str) -> Path:
        return self.directory / f"{self.scope}-{_digest(namespace)}.lock"

    @contextlib.contextmanager
    def turn(self, namespace: str, deadline: float) -> Iterator[bool]:
        """Hold the namespace's host turn until the block ends; yields whether it was had by
        `deadline` (time.monotonic()), else the block runs without it."""
        fd = self._open(namespace)
        if fd is None:
            yield False
            return
        try:
            yield self._lock(fd, deadline)
        finally:
            os.close(fd)  # closing the file releases the lock

    def _open(self, namespace: str) -> int | None:
        if not self.usable:
            return None
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
            return os.open(self._path(namespace), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            # A read-only or full temporary directory: go on without host turns.
            self.usable = False
            log.warning("ledger turns are not shared between worker processes", error=str(e))
            return None

    @staticmethod
    def _lock(fd: int, deadline: float) -> bool:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(HOST_TURN_POLL_SECONDS)
