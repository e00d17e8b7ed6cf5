"""Which copy of a ledger a turn starts from: the watch's, or a fresh GET.

A turn decides on a copy of the ledger and writes with that copy's resourceVersion as a
precondition, so a decision made on a stale copy fails with 409 and is made again on a GET:
whatever copy a turn starts from, it can only land on the current ledger. The copy only decides
what a turn costs. Starting every turn with a GET cost a request per turn, and two servers that
each began a turn as soon as their last write landed raced each other all the time (a third of
their writes lost to 409s). Starting from the last copy held, without more, was tried and lost
to conflicts: the other server had nearly always written since.

So each write carries a turn stamp (TURN_ANNOTATION): a sequence number one above the copy it
was decided on, and the writer (a quota server's process, which keeps the note of the last
sequence number it wrote, see priogate/kube/watched_ledger.py). A turn then starts from the
watch's copy when that copy is newer than anything its process wrote. When the newest copy is the
process's own last write and another writer was active a moment ago, the turn waits a little for
that writer's next write (the servers take turns instead of racing), then starts from the newest
copy. When the watch has not shown the process's last write yet, the turn waits for it, then GETs.

A writer that other replicas can reach names its address in the stamp (`ADDRESS/PROCESS`, see
writer_name): a replica that is not the namespace's writer relays its admissions there instead of
racing it for the ledger (webhook/ledger_relay.py).

The stamp is a hint, like the resourceVersion read by a client of optimistic concurrency in
kube-apiserver (API concepts, "Resource versions"): a forged or garbled stamp costs a wait or a
GET, never a wrong decision.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TURN_ANNOTATION = "priogate.io/turn"


@dataclass(frozen=True)
class Turn:
    """The stamp of the write that made a copy: `seq` -1 when there is none (a ledger written
    before the stamps, or by hand)."""

    seq: int
    writer: str

    def next(self, writer: str) -> Turn:
        """The stamp of a write decided on this copy."""
        return Turn(max(self.seq, -1) + 1, writer)

    def annotation(self) -> str:
        return f"{self.seq} {self.writer}"


UNSTAMPED = Turn(-1, "")


def turn_of(obj: Mapping[str, Any]) -> Turn:
    """The stamp a ledger ConfigMap carries; UNSTAMPED when it carries none that parses."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(TURN_ANNOTATION)
    if not isinstance(text, str):
        return UNSTAMPED
    seq, _, writer = text.partition(" ")
    if not seq.isdigit() or not writer:
        return UNSTAMPED
    return Turn(int(seq), writer)


def writer_name(process: str, peer_address: str | None = None) -> str:
    """The writer a process's stamps name: its peer address (HOST:PORT where other replicas
    reach its admission port) and its process name, or the process name alone."""
    return f"{peer_address}/{process}" if peer_address else process


def peer_of(writer: str) -> tuple[str, int] | None:
    """(host, port) of the peer address a writer names, or None when it names none that parses.
    The host may be an IPv6 address, bracketed or not: the port follows the last colon."""
    address, slash, _ = writer.partition("/")
    host, colon, port = address.rpartition(":")
    host = host.strip("[]")
    if not (slash and colon and _HOST.fullmatch(host) and port.isdigit() and 0 < int(port) < 65536):
        return None
    return host, int(port)


# An IPv4 or IPv6 address or a DNS name: nothing a URL would read otherwise.
_HOST = re.compile(r"[0-9A-Za-z.:-]+")


def turn_holder(seen: Mapping[str, float], now: float, fresh: float) -> str | None:
    """Which writer holds a namespace's turn, for relaying: of the writers seen writing its
    ledger within `fresh` seconds (`seen`: writer -> when its latest write was first seen), the
    least by name. Every replica picks the same one from what its watch shows, without a word
    exchanged, so the turn stays with one replica while it writes; the last writer would not do,
    as two replicas with batches in flight would each hand the turn to the other. None: nobody
    wrote lately."""
    active = [writer for writer, when in seen.items() if now - when <= fresh]
    return min(active) if active else None


class Start(enum.Enum):
    COPY = "copy"  # decide on the watch's copy
    WAIT = "wait"  # wait for the watch to show another write
    GET = "get"  # decide on a fresh GET


def start_from(copy: Turn, ours: int, others_active: bool, waited_out: bool) -> Start:
    """Where a turn starts, given the watch's copy's stamp, the last sequence number the pod
    wrote on this ledger (-1: none known), whether another writer wrote a moment ago, and
    whether the turn has waited as long as it may."""
    if ours < 0 or copy.seq > ours:
        return Start.COPY  # newer than anything the pod wrote, or nothing better known
    if copy.seq == ours:
        # The pod's own last write is the newest copy: let a busy other writer have its turn.
        return Start.COPY if waited_out or not others_active else Start.WAIT
    # The watch has not shown the pod's last write yet (or the copy lost its stamp).
    return Start.GET if waited_out else Start.WAIT
