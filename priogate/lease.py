"""Leader election decisions over a coordination.k8s.io/v1 Lease, as pure functions.

client-go's semantics (tools/leaderelection): a candidate takes the lease only when it is free
(never created, released with an empty holderIdentity) or expired. Expiry is judged on the
candidate's own clock: the lease is expired when the holder's record has not changed for
leaseDuration since this process last *observed* a change, so clock skew between machines does
not matter. The holder renews every retry period and gives up leading when it has not renewed
for renewDeadline (shorter than leaseDuration, so it stops before anyone else may start).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from priogate.clock import micro_time

LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    lease_duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime") or "",
            renew_time=spec.get("renewTime") or "",
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


class Action(Enum):
    CREATE = "create"  # no lease object yet: create it holding it
    ACQUIRE = "acquire"  # free or expired: take it over (a write with the resourceVersion read)
    RENEW = "renew"  # ours: refresh renewTime
    WAIT = "wait"  # someone else holds a live lease


def next_action(
    observed: LeaseRecord | None, observed_at: float, now: float, identity: str, duration: float
) -> Action:
    """What a candidate should do. `observed_at` is the local monotonic time at which the current
    record was first seen (client-go's observedTime); `now` is the same clock."""
    if observed is None:
        return Action.CREATE
    if observed.holder == identity:
        return Action.RENEW
    if not observed.holder:
        return Action.ACQUIRE  # released on a graceful stop: take it at once
    # The holder's own duration counts, as client-go does: a record written by a holder with a
    # longer lease must not be cut short by this candidate's setting.
    held_for = observed.lease_duration_seconds or duration
    if now < observed_at + held_for:
        return Action.WAIT
    return Action.ACQUIRE


def next_record(
    action: Action, observed: LeaseRecord | None, identity: str, now_wall: dt.datetime, duration: float
) -> LeaseRecord:
    """The record to write for `action` (not WAIT). leaseTransitions counts changes of holder."""
    stamp = micro_time(now_wall)
    if action is Action.RENEW and observed is not None:
        return LeaseRecord(
            identity, int(duration), observed.acquire_time or stamp, stamp, observed.transitions
        )
    if action is Action.CREATE or observed is None:
        return LeaseRecord(identity, int(duration), stamp, stamp, 0)
    if action is Action.ACQUIRE:
        transitions = observed.transitions + (1 if observed.holder != identity else 0)
        return LeaseRecord(identity, int(duration), stamp, stamp, transitions)
    raise ValueError(f"no record to write for {action}")


def released(record: LeaseRecord, now_wall: dt.datetime) -> LeaseRecord:
    """client-go's release: empty holder and a 1 s duration, so any candidate acquires at once."""
    return LeaseRecord("", 1, record.acquire_time, micro_time(now_wall), record.transitions)


def still_leading(last_renewed: float, now: float, renew_deadline: float) -> bool:
    """A leader that has not renewed within renewDeadline must stop acting."""
    return now - last_renewed < renew_deadline
