"""Kubernetes time formats, as pure functions: the one place a timestamp is written or read.

metav1.Time is RFC 3339 in UTC to the second ("2024-05-01T12:00:00Z"), as written to
status.conditions[].lastTransitionTime and the ledger's admittedAt; metav1.MicroTime adds
microseconds, as written to a Lease's acquireTime/renewTime and an Event's eventTime
(k8s.io/apimachinery pkg/apis/meta/v1 time.go and micro_time.go).
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def rfc3339(moment: dt.datetime) -> str:
    """metav1.Time's form, in UTC."""
    return moment.astimezone(dt.UTC).strftime(RFC3339)


def micro_time(moment: dt.datetime) -> str:
    """metav1.MicroTime's form, in UTC."""
    return moment.astimezone(dt.UTC).strftime(MICRO_TIME)


def from_epoch(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def parse_rfc3339(text: str) -> dt.datetime:
    """Exactly the form rfc3339() writes, as an aware UTC datetime; ValueError otherwise."""
    return dt.datetime.strptime(text, RFC3339).replace(tzinfo=dt.UTC)


@lru_cache(maxsize=16384)
def parse_time(text: str) -> dt.datetime:
    """Either form this module writes (MicroTime or Time), as an aware UTC datetime; ValueError
    otherwise. For ledgers whose older copies hold whole seconds. Cached: every admission reads
    the same stamps of a namespace's ledger again."""
    if len(text) in (20, 27) and _fixed_form(text):
        # fromisoformat parses these exact layouts several times faster than strptime.
        return dt.datetime.fromisoformat(text[:-1]).replace(tzinfo=dt.UTC)
    try:
        return dt.datetime.strptime(text, MICRO_TIME).replace(tzinfo=dt.UTC)
    except ValueError:
        return parse_rfc3339(text)


def _fixed_form(text: str) -> bool:
    """ "YYYY-MM-DDTHH:MM:SSZ" or "YYYY-MM-DDTHH:MM:SS.ffffffZ" by its separators (fromisoformat
    checks the other digits; the fraction's are checked here, or "-05" would pass as an offset)."""
    return (
        text[4] == text[7] == "-"
        and text[10] == "T"
        and text[13] == text[16] == ":"
        and text[-1] == "Z"
        and (len(text) == 20 or (text[19] == "." and text[20:26].isdigit()))
    )


def epoch_seconds(text: str) -> float:
    """Any RFC 3339 time as the API server or a hand-written object may hold it (fractions,
    offsets, a lowercase z) as epoch seconds; ValueError otherwise."""
    return dt.datetime.fromisoformat(text.replace("z", "Z")).timestamp()
