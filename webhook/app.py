"""The Flask app: health, readiness and metrics routes, with the admission endpoints mounted as
its WSGI layer (webhook/endpoints.py says why)."""

from __future__ import annotations

from collections.abc import Sequence

from flask import Flask, Response

from webhook import metrics
from webhook.endpoints import AdmissionEndpoints
from webhook.registry import RuleSet, fresh_needs, load_rule_sets
from webhook.view import CacheView

# app.extensions key of the app's readiness check: () -> (status, text).
READINESS = "priogate.readiness"


def _plain(status: int, text: str) -> Response:
    return Response(text.rstrip("\n") + "\n", status=status, mimetype="text/plain")


def create_app(view: CacheView, rule_sets: Sequence[RuleSet] | None = None) -> Flask:
    app = Flask("priogate")
    rule_sets = list(rule_sets if rule_sets is not None else load_rule_sets())
    endpoints = AdmissionEndpoints(rule_sets, view, fallback=app.wsgi_app)
    app.wsgi_app = endpoints  # type: ignore[method-assign]

    @app.get("/healthz")
    def healthz() -> Response:
        return _plain(200, "ok")

    # Readiness follows what the rule sets answer from: every cache must have listed once, and
    # those some rule set will not answer from while stale must be current. A server that would
    # refuse every quota request leaves the Service's endpoints, so kube-apiserver's calls go to a
    # replica that can decide (or, with none, meet the hook's failurePolicy).
    must_be_current = fresh_needs(rule_sets)

    def readiness() -> tuple[int, str]:
        caches = view.caches
        unsynced = view.unlisted(list(caches))
        stale = [n for n in view.unsynced(sorted(must_be_current & set(caches))) if n not in unsynced]
        if unsynced or stale:
            lines = [f"caches not synced: {', '.join(unsynced)}"] if unsynced else []
            lines += [
                f"cache {n} stale for {caches[n].stale_seconds():.0f} s: {caches[n].state().reason}"
                for n in stale
            ]
            return 503, "\n".join(lines)
        tolerated = [n for n in caches if caches[n].stale]
        if tolerated:
            return 200, f"ok (answering from stale caches: {', '.join(tolerated)})"
        return 200, "ok"

    # The server reports the same check to the health port (webhook/health.py, server.py).
    app.extensions[READINESS] = readiness

    @app.get("/readyz")
    def readyz() -> Response:
        return _plain(*readiness())

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    @app.errorhandler(405)
    def wrong_method(_: Exception) -> Response:
        return _plain(405, "method not allowed")

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        paths = ", ".join(r.path for r in rule_sets)
        return _plain(404, f"no such endpoint; admission paths are: {paths}")

    return app
