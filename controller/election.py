"""The leader-election loop: priogate/lease.py's decisions applied to a real Lease.

Every write carries the resourceVersion that was read, so when two candidates race the API
server accepts one and answers 409 to the other, which re-reads on its next turn.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog

from priogate import lease as leader
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.lease import Action, LeaseRecord

log = structlog.get_logger("priogate.controller.election")

LEASE_GROUP_VERSION = "coordination.k8s.io/v1"


def default_identity() -> str:
    """Pod name (the hostname in a pod) plus a random suffix, so two processes on one host differ."""
    base = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{base}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(
        self,
        client: ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = leader.LEASE_DURATION,
        renew_deadline: float = leader.RENEW_DEADLINE,
        retry_period: float = leader.RETRY_PERIOD,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry period < renew deadline < lease duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        # Every lease request (read or write) gives up well inside the renew deadline, so a hung
        # connection cannot keep a leader acting past it (client-go bounds each renew attempt by
        # the deadline too: leaderelection's renew uses a context with RenewDeadline).
        read = max(0.5, min(5.0, renew_deadline / 4))
        self.timeout = (min(2.0, read), read)
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._leading = False
        self._last_renewed = 0.0
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return resource_path(LEASE_GROUP_VERSION, "leases", self.namespace, self.name)

    def is_leader(self) -> bool:
        """True only while the lease is ours and was renewed within the renew deadline: a worker
        checks this before each write, so a leader cut off from the API server stops acting even
        before its loop notices."""
        with self._lock:
            return self._leading and leader.still_leading(
                self._last_renewed, time.monotonic(), self.renew_deadline
            )

    def run(self, stop: threading.Event) -> None:
        log.info("leader election started", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        while not stop.is_set():
            ok = self._try_acquire_or_renew()
            now = time.monotonic()
            if ok:
                with self._lock:
                    was_leading, self._leading, self._last_renewed = self._leading, True, now
                if not was_leading:
                    log.info("became leader", identity=self.identity)
                    self.on_started()
                stop.wait(self.retry_period)
                continue
            if self._leading and not leader.still_leading(self._last_renewed, now, self.renew_deadline):
                self._stop_leading("renewal failed past the renew deadline")
            # Candidates jitter their retries (client-go's JitterFactor 1.2) so they do not collide.
            wait = self.retry_period if self._leading else self.retry_period * random.uniform(1.0, 1.2)
            stop.wait(wait)
        if self._leading:
            # Stop acting first (on_stopped waits for the work in flight), then hand the lease
            # over, so two leaders never act at once.
            self._stop_leading("stopping")
            self._release()

    def _stop_leading(self, why: str) -> None:
        with self._lock:
            self._leading = False
        log.warning("stopped leading", identity=self.identity, reason=why)
        self.on_stopped()

    def _read(self) -> tuple[dict[str, Any] | None, LeaseRecord | None]:
        try:
            lease = self.client.get(self.path, timeout=self.timeout)
        except ApiError as e:
            if e.status != 404:
                raise
            return None, None
        return lease, LeaseRecord.from_lease(lease)

    def _try_acquire_or_renew(self) -> bool:
        try:
            lease, record = self._read()
        except Exception as e:  # any failure to read is a failed round; the deadline decides
            log.warning("cannot read the lease", error=str(e))
            return False
        now = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        action = leader.next_action(record, self._observed_at, now, self.identity, self.lease_duration)
        if action is Action.WAIT:
            return False
        new = leader.next_record(action, record, self.identity, dt.datetime.now(dt.UTC), self.lease_duration)
        try:
            self._write(lease, new)
        except ApiError as e:
            if e.status == 409:  # someone else wrote first: re-read on the next round
                log.info("lease write conflicted", action=action.value)
                return False
            log.warning("cannot write the lease", action=action.value, error=str(e))
            return False
        except Exception as e:
            log.warning("cannot write the lease", action=action.value, error=str(e))
            return False
        self._observed, self._observed_at = new, time.monotonic()
        return True

    def _write(self, lease: dict[str, Any] | None, record: LeaseRecord) -> None:
        if lease is None:
            body = {
                "apiVersion": LEASE_GROUP_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.to_spec(),
            }
            self.client.request(
                "POST",
                resource_path(LEASE_GROUP_VERSION, "leases", self.namespace),
                body=body,
                timeout=self.timeout,
            )
            return
        # The body carries metadata.resourceVersion as read: the API server's precondition.
        body = {**lease, "spec": record.to_spec()}
        self.client.request("PUT", self.path, body=body, timeout=self.timeout)

    def _release(self) -> None:
        """Clear holderIdentity so a standby takes over at once instead of after leaseDuration."""
        for _ in range(3):
            try:
                lease, record = self._read()
                if lease is None or record is None or record.holder != self.identity:
                    return
                self._write(lease, leader.released(record, dt.datetime.now(dt.UTC)))
                log.info("released the lease", identity=self.identity)
                return
            except ApiError as e:
                if e.status != 409:
                    log.warning("cannot release the lease", error=str(e))
                    return
            except Exception as e:
                log.warning("cannot release the lease", error=str(e))
                return
