"""The Flask admission app: one route per registered rule set, plus health, readiness, metrics.

serve() owns HTTP and the envelope; rule sets only see a parsed request and the ClusterView.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import structlog
from flask import Flask, Response, request

from webhook import metrics
from webhook.objects import MalformedObject
from webhook.registry import RuleSet, load_rule_sets
from webhook.review import BadReview, Decision, deny, parse_review, review_response
from webhook.view import CacheView

log = structlog.get_logger("priogate.webhook")

MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver caps objects at 3 MiB in etcd; a review is ~that
CACHE_SYNC_GRACE_SECONDS = 2.0


def _plain(status: int, text: str) -> Response:
    return Response(text.rstrip("\n") + "\n", status=status, mimetype="text/plain")


def _bad_request(rule_set: RuleSet, reason: str) -> Response:
    metrics.BAD_REQUESTS.labels(rule_set.name).inc()
    log.info("bad request", webhook=rule_set.name, reason=reason)
    return _plain(400, reason)


def _decide(rule_set: RuleSet, view: CacheView, body: bytes) -> tuple[Response, str, str]:
    """Returns the response, the operation and the decision label."""
    try:
        review = parse_review(body)
    except BadReview as e:
        return _bad_request(rule_set, str(e)), "", "bad-request"
    unsynced = view.unsynced(rule_set.needs)
    if unsynced and not all(view.caches[n].wait_synced(CACHE_SYNC_GRACE_SECONDS) for n in unsynced):
        decision = deny(
            f"priogate is starting: its {', '.join(unsynced)} cache is not synced yet; retry shortly",
            code=503,
            reason="ServiceUnavailable",
        )
    else:
        try:
            decision = rule_set.handler(review, view)
        except MalformedObject as e:
            decision = deny(f"malformed {review.kind.get('kind') or 'object'}: {e}", code=400)
        except Exception:
            log.exception("rule set failed", webhook=rule_set.name, uid=review.uid)
            decision = Decision(
                False,
                message=f"internal error in {rule_set.name}; see the webhook's logs",
                code=500,
                reason="InternalError",
            )
    label = "allow" if decision.allowed else ("error" if decision.code >= 500 else "deny")
    if not decision.allowed:
        log.info(
            "denied",
            webhook=rule_set.name,
            operation=review.operation,
            kind=review.kind.get("kind"),
            namespace=review.namespace,
            name=review.name,
            code=decision.code,
            reason=decision.message,
            dry_run=review.dry_run,
        )
    return (
        Response(_json(review_response(review, decision)), mimetype="application/json"),
        review.operation,
        label,
    )


def _json(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"))


def create_app(view: CacheView, rule_sets: Sequence[RuleSet] | None = None) -> Flask:
    app = Flask("priogate")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    rule_sets = list(rule_sets if rule_sets is not None else load_rule_sets())

    def serve(rule_set: RuleSet) -> Response:
        started = time.perf_counter()
        in_flight, latency = bound_metrics[rule_set.name]
        in_flight.inc()
        req = request._get_current_object()  # one proxy lookup, not one per attribute
        try:
            if req.mimetype != "application/json":
                return _bad_request(rule_set, f"Content-Type must be application/json, got {req.mimetype!r}")
            # Flask answers 413 from get_data() for bodies over MAX_CONTENT_LENGTH.
            response, operation, decision = _decide(rule_set, view, req.get_data(cache=False))
            metrics.REQUESTS.labels(rule_set.name, operation, decision).inc()
            return response
        finally:
            in_flight.dec()
            latency.observe(time.perf_counter() - started)

    # Label lookups cost more than the updates themselves; do them once.
    bound_metrics = {
        r.name: (metrics.IN_FLIGHT.labels(r.name), metrics.LATENCY.labels(r.name)) for r in rule_sets
    }
    for rule_set in rule_sets:
        app.add_url_rule(
            rule_set.path,
            endpoint=rule_set.name,
            view_func=lambda rs=rule_set: serve(rs),
            methods=["POST"],
        )

    @app.get("/healthz")
    def healthz() -> Response:
        return _plain(200, "ok")

    @app.get("/readyz")
    def readyz() -> Response:
        unsynced = view.unsynced(list(view.caches))
        if unsynced:
            return _plain(503, f"caches not synced: {', '.join(unsynced)}")
        return _plain(200, "ok")

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    @app.errorhandler(413)
    def too_large(_: Exception) -> Response:
        return _plain(413, f"body larger than {MAX_BODY_BYTES} bytes")

    @app.errorhandler(405)
    def wrong_method(_: Exception) -> Response:
        return _plain(405, "method not allowed: admission endpoints take POST")

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        paths = ", ".join(r.path for r in rule_sets)
        return _plain(404, f"no such endpoint; admission paths are: {paths}")

    return app
