"""How a rule set answers when its turn on a ledger failed: kube-apiserver then
tells the client to retry (429 while the ledger is contended, 503 while it cannot be read or
written), never an error that looks like a verdict on the object; a ledger too large to write
is refused for what it is (403), since retrying cannot help."""

from __future__ import annotations

from priogate.kube.client import ApiError
from priogate.kube.ledger_store import LedgerBusy
from priogate.ledger.codec import LedgerFull
from webhook.review import Decision, deny


def ledger_refusal(what: str, error: Exception) -> Decision | None:
    """The refusal for a failed turn of `what` (e.g. "pod quota"), or None for an error that is
    not the ledger's (a bug: the caller re-raises it)."""
    if isinstance(error, LedgerFull):
        # Not a passing state: a retry fails the same way until groups are deleted.
        return deny(f"{what}: {error}", code=403)
    if isinstance(error, LedgerBusy):
        busy = f"{what}: the ledger is busy, retry: {error}"
        return deny(busy, code=429, reason="TooManyRequests")
    if isinstance(error, ValueError | ApiError | OSError):
        return deny(
            f"{what}: the ledger could not be read or written ({error}); retry",
            code=503,
            reason="ServiceUnavailable",
        )
    return None
