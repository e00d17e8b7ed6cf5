"""`python -m tests.slow_rule_server PORT CERT KEY SLEEP`: the real webhook server (gunicorn, TLS,
webhook/worker.py's worker, one worker process of one thread) serving a single test rule set at
/validate/slow that holds its thread SLEEP seconds, then refuses with the seconds its request
had left until its deadline, so a test can see how a request's deadline was counted."""

from __future__ import annotations

import sys
import time
from typing import Any

from webhook.endpoints import AdmissionEndpoints
from webhook.registry import Handler, RuleSet
from webhook.review import AdmissionRequest, Decision, deny
from webhook.server import ServerOptions, WebhookServer
from webhook.view import CacheView


def probe_rule_set(handler: Handler) -> RuleSet:
    """A validating rule set for pod CREATEs at /validate/slow that answers with `handler`."""
    return RuleSet(
        name="slow.priogate.io",
        path="/validate/slow",
        kind="validating",
        handler=handler,
        api_groups=("",),
        api_versions=("v1",),
        resources=("pods",),
        operations=("CREATE",),
    )


def _app(sleep_seconds: float) -> Any:
    def handler(request: AdmissionRequest, _view: Any) -> Decision:
        time.sleep(sleep_seconds)
        left = None if request.deadline is None else request.deadline - time.monotonic()
        return deny(f"left={left}")

    def not_found(_environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    return AdmissionEndpoints([probe_rule_set(handler)], CacheView({}), not_found)


def main() -> None:
    port, cert, key, sleep_seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    options = ServerOptions(
        bind=f"127.0.0.1:{port}", cert_file=cert, key_file=key, kubeconfig=None, workers=1, threads=1
    )
    sys.argv = sys.argv[:1]  # gunicorn reads the command line too
    WebhookServer(options, app_factory=lambda: _app(sleep_seconds)).run()


if __name__ == "__main__":
    main()
