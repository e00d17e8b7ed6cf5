"""Keep a running server's certificate fresh: a daemon thread that calls refresh_files now and
then. Every server process runs one; the Secret's resourceVersion settles races between them
(ensure_secret), so all replicas converge on one renewed certificate."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import structlog

from certs.bootstrap import refresh_files
from priogate.kube.client import ApiClient

log = structlog.get_logger("priogate.certs")


def start_rotation(
    client: ApiClient, namespace: str, secret: str, out: Path, *, interval_seconds: float = 3600.0
) -> threading.Thread:
    def run() -> None:
        while True:
            # Jitter spreads the replicas' checks; a failed check is retried at the next one,
            # well before the 30 days of renewal margin run out.
            time.sleep(interval_seconds * random.uniform(0.5, 1.0))
            try:
                refresh_files(client, namespace, secret, out)
            except Exception as e:
                log.warning(
                    "certificate refresh failed; retrying later",
                    secret=f"{namespace}/{secret}",
                    error=repr(e),
                )

    thread = threading.Thread(target=run, name="cert-rotation", daemon=True)
    thread.start()
    return thread
