"""Relaying a ledger admission to the replica that holds the namespace's ledger turn.

Two quota servers taking turns on one namespace's ledger race for it: each decides on its copy,
and the one whose write lands second loses it to a 409, reads the ledger again and writes again
(docs/ledger.md, "One writer per namespace"). One writer per namespace would batch every waiting
admission into one write and lose none, but kube-apiserver spreads webhook calls over a
Service's endpoints by connection or by request, never by namespace, so nothing in the webhook
configuration can send a namespace to one replica. So a replica that does not hold the
namespace's turn (of the writers its watch showed writing the ledger a moment ago, the least by
name: priogate.ledger.turn_order.turn_holder) sends the AdmissionReview on to the holder's peer
address, which decides it in its batch; the holder's answer goes back to kube-apiserver as it is.

A relay is never needed for safety, only to save the race: the resourceVersion precondition on
every write keeps the invariant wherever an admission is decided. So a relay that fails in any
way (the writer gone, its certificate not the one this replica serves, an answer that is not
200) is decided where it landed, as without relaying; a writer that failed is left alone for
RELAY_BACKOFF_SECONDS. A relayed request carries RELAYED_HEADER and is never relayed again.

The writer must prove it holds the webhook's serving certificate: the connection trusts exactly
the certificate file this replica serves (all replicas mount the same Secret), so a stamp that
names another address cannot draw an admission anywhere else. The relaying replica presents the
same certificate as its client certificate, so relaying works where the webhook requires client
certificates (--client-ca-file): such a server trusts its own certificate beside the client CA
(webhook/server.py). A serving certificate whose extended key usage leaves out clientAuth
cannot be presented; every relay then fails and is decided where it landed.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
import urllib3

from certs.files import leaf_pem
from priogate.ledger.timing import (
    ANSWER_MARGIN_SECONDS,
    RELAY_BACKOFF_SECONDS,
    RELAY_CONNECT_SECONDS,
    TURN_DEADLINE_SECONDS,
)
from webhook import metrics

log = structlog.get_logger("priogate.webhook")

# Marks a relayed request; its WSGI environ key is HTTP_PRIOGATE_RELAYED.
RELAYED_HEADER = "Priogate-Relayed"
RELAYED_ENVIRON = "HTTP_" + RELAYED_HEADER.upper().replace("-", "_")
# Connections kept open to each writer: about the admissions one replica has in flight at once.
POOL_SIZE = 16


def _client_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """Trusts exactly the serving certificate this replica presents (the leaf of `cert_file`;
    what follows it is its chain, whose issuers may sign others), whatever signed it: a partial
    chain ending at a trusted leaf is accepted. Presents it too, with its key, for a writer that
    requires client certificates."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # the peer is reached by its pod address; the pin is the check
    context.verify_mode = ssl.CERT_REQUIRED
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    try:
        context.load_verify_locations(cadata=leaf_pem(cert_file))
    except ValueError as e:
        raise ssl.SSLError(str(e)) from None
    context.load_cert_chain(cert_file, key_file)
    return context


class LedgerRelay:
    def __init__(
        self,
        writer_of: Callable[[str], tuple[str, int] | None],
        cert_file: str,
        key_file: str,
        *,
        holds_a_turn: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`writer_of(namespace)`: the peer address of the namespace's writer when it is another
        replica (WatchedLedgers.writer_of), else None. `holds_a_turn()`: whether this replica
        writes some namespace's ledger itself (WatchedLedgers.holds_a_turn)."""
        self.writer_of = writer_of
        self.holds_a_turn = holds_a_turn
        self.cert_file = cert_file
        self.key_file = key_file
        self.clock = clock
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, int], urllib3.HTTPSConnectionPool] = {}
        self._failed: dict[tuple[str, int], float] = {}  # address -> when a relay to it failed
        self._files: tuple[tuple[int, int, int], ...] = ()  # the certificate's and key's, loaded
        self._context: ssl.SSLContext | None = None

    def writer(self, namespace: str) -> tuple[str, int] | None:
        """Where to send the namespace's ledger admissions: its writer's address, or None: decide
        them here (this replica writes, nobody wrote lately, or the writer failed a moment ago)."""
        address = self.writer_of(namespace)
        if address is None:
            return None
        failed = self._failed.get(address)
        if failed is not None and self.clock() - failed < RELAY_BACKOFF_SECONDS:
            return None
        return address

    def sheds_connections(self) -> bool:
        """Whether a relayed admission's answer asks kube-apiserver to close its connection, so
        that its next one may reach the writer and stay there (docs/ledger.md, "One writer per
        namespace"): only while this replica holds no namespace's turn. One that holds some
        keeps its connections, or two replicas holding the turns of different namespaces would
        each send kube-apiserver's connections to the other, a new connection per relay."""
        return not self.holds_a_turn()

    def send(self, address: tuple[str, int], path: str, body: bytes, deadline: float | None) -> bytes | None:
        """The writer's answer to the review `body` sent to `path` at `address`, or None: decide
        it here (the relay failed). `deadline` (time.monotonic()): when the caller must have an
        answer; the writer is told what is left of it."""
        left = None if deadline is None else deadline - self.clock() - ANSWER_MARGIN_SECONDS
        if left is not None and left <= RELAY_CONNECT_SECONDS:
            return None  # not time enough to relay and still decide here if it fails
        query = "" if left is None else f"?timeout={int(left * 1000)}ms"
        try:
            response = self._pool(address).urlopen(
                "POST",
                path + query,
                body=body,
                headers={"Content-Type": "application/json", RELAYED_HEADER: "1"},
                # No deadline given (offline tests): the writer's own turn deadline bounds it.
                timeout=urllib3.Timeout(connect=RELAY_CONNECT_SECONDS, read=left or TURN_DEADLINE_SECONDS),
                retries=False,
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError, ssl.SSLError) as e:
            self._fail(address, str(e))
            return None
        if response.status != 200:
            self._fail(address, f"answered {response.status}")
            return None
        metrics.LEDGER_RELAYS.labels("answered").inc()
        return response.data

    def _fail(self, address: tuple[str, int], reason: str) -> None:
        metrics.LEDGER_RELAYS.labels("failed").inc()
        with self._lock:
            self._failed[address] = self.clock()
            pool = self._pools.pop(address, None)
        if pool is not None:
            pool.close()
        log.info("relay to the ledger's writer failed; deciding here", writer=address, reason=reason)

    def _pool(self, address: tuple[str, int]) -> Any:
        files = tuple(
            (s.st_mtime_ns, s.st_size, s.st_ino) for s in map(os.stat, (self.cert_file, self.key_file))
        )
        with self._lock:
            if self._context is None or files != self._files:
                # A renewed certificate (certs.rotation rewrites the files): trust and present
                # the new one, on new connections.
                self._context, self._files = _client_context(self.cert_file, self.key_file), files
                stale, self._pools = self._pools, {}
            else:
                stale = {}
            pool = self._pools.get(address)
            if pool is None:
                host, port = address
                pool = self._pools[address] = urllib3.HTTPSConnectionPool(
                    host,
                    port,
                    ssl_context=self._context,
                    assert_hostname=False,
                    maxsize=POOL_SIZE,
                    block=False,
                )
        for old in stale.values():
            old.close()
        return pool
