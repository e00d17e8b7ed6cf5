"""The enrolment label on a namespace, and the dry-run coverage probe (priogate.scope)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from priogate import podgroup
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE, probe_body

# Answers worth another try: a conflict (409; a merge patch without a resourceVersion should not
# meet one, but the rule is to retry it), throttling, and the API server's own trouble.
RETRIED = frozenset({409, 429, 500, 502, 503, 504})
CALL_TIMEOUT = (3, 5)


def label_namespace(
    client: ApiClient,
    name: str,
    *,
    deadline: float,
    key: str = ENROLLED_LABEL,
    value: str = ENROLLED_VALUE,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Mapping[str, Any]:
    """Merge-patch one label onto a namespace (idempotent), retrying what may pass by the
    deadline (time.monotonic()). Raises the last ApiError otherwise."""
    body = {"metadata": {"labels": {key: value}}}
    path = resource_path("v1", "namespaces", None, name)
    pause = 0.05
    while True:
        try:
            return client.request(
                "PATCH", path, body=body, content_type="application/merge-patch+json", timeout=CALL_TIMEOUT
            )
        except ApiError as e:
            if e.status not in RETRIED or clock() + pause >= deadline:
                raise
        sleep(pause)
        pause = min(pause * 2, 0.5)


def probe_refusal(client: ApiClient, namespace: str) -> str | None:
    """Dry-run CREATE the coverage probe in the namespace: the refusal's message, None if it
    was admitted (nothing is stored either way). An error status >= 500 raises."""
    path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace)
    try:
        client.request("POST", path, body=probe_body(), query=[("dryRun", "All")], timeout=CALL_TIMEOUT)
    except ApiError as e:
        if e.status >= 500:
            raise
        return e.message
    return None
