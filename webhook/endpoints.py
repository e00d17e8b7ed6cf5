"""The admission endpoints: a small WSGI layer inside the Flask app (`app.wsgi_app`).

Why not Flask routes: Flask's request and response machinery (contexts, URL adapter, signals,
header objects) costs more per call than priogate's own work on a review (decode, resolve,
answer; docs/how-it-works.md has the measurement). The admission paths are the hot path, so
they are answered here from the WSGI environ, and Flask serves everything else (health,
readiness, metrics, unknown paths). Behaviour is the same either way: a 400 with a one-line
reason for a body that is not an AdmissionReview, 405 for a method other than POST, 413 above
the body cap; never a 500 for bad input.

answer_review() owns the envelope; rule sets only see a parsed request and the ClusterView.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson
import structlog

from webhook import metrics
from webhook.ledger_relay import RELAYED_ENVIRON, LedgerRelay
from webhook.loop import WouldBlock, forbid_waiting
from webhook.objects import MalformedObject
from webhook.registry import RuleSet
from webhook.review import (
    AdmissionRequest,
    BadReview,
    Decision,
    caller_timeout,
    deny,
    parse_review,
    review_response,
)
from webhook.view import CacheView

log = structlog.get_logger("priogate.webhook")

# kube-apiserver's own cap on a request body (k8s.io/apiserver pkg/server/config.go
# MaxRequestBodyBytes): a review carries at most about that.
MAX_BODY_BYTES = 3 * 1024 * 1024
CACHE_SYNC_GRACE_SECONDS = 2.0
SLOW_SECONDS = 1.0  # an admission slower than this is logged: kube-apiserver waits 5 to 10 s at most

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Answer = tuple[str, list[tuple[str, str]], bytes]  # status line, headers, body

_STATUS_LINES = {
    200: "200 OK",
    400: "400 Bad Request",
    405: "405 Method Not Allowed",
    408: "408 Request Timeout",
    413: "413 Content Too Large",
}

# The environ key of when the server had the request (time.monotonic()), where it knows better
# than the app: webhook/asgi.py reads the body first.
ARRIVED_ENVIRON = "priogate.arrived"


def plain(status: int, text: str, extra_headers: Sequence[tuple[str, str]] = ()) -> Answer:
    body = (text.rstrip("\n") + "\n").encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    return _STATUS_LINES[status], [*headers, *extra_headers], body


def _json(body: bytes) -> Answer:
    return "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))], body


def _closing(answer: Answer) -> Answer:
    """`answer`, asking the client to close the connection after it: kube-apiserver then opens
    another, which the Service sends to any replica, and one that reaches the writer stays there.
    So the connections that carry a namespace's ledger admissions move to the replica that
    decides them, and the relay hop (a second request, TLS both ways) ends. kube-apiserver
    rebalances its own HTTP/2 clients the same way (k8s.io/apiserver pkg/server/filters/goaway.go)."""
    status, headers, body = answer
    return status, [*headers, ("Connection", "close")], body


class TooLarge(Exception):
    pass


def read_body(environ: dict[str, Any]) -> bytes:
    """The request body, refusing more than MAX_BODY_BYTES without reading it all."""
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH")
    if length:
        try:
            size = int(length)
        except ValueError:
            raise BadReview(f"Content-Length must be a number, got {length!r}") from None
        if size > MAX_BODY_BYTES:
            raise TooLarge()
        return stream.read(size) if size > 0 else b""
    if environ.get("wsgi.input_terminated"):  # chunked: the server marks the end of the body
        body = stream.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            raise TooLarge()
        return body
    return b""


def _decided(
    rule_set: RuleSet,
    handler: Callable[[AdmissionRequest, CacheView], Decision | None],
    review: AdmissionRequest,
    view: CacheView,
) -> Decision | None:
    """`handler`'s decision, with a malformed object refused (400) and a failure answered as
    an internal error (500) that names the rule set."""
    try:
        return handler(review, view)
    except WouldBlock:
        raise  # answered again on a thread (webhook/loop.py)
    except MalformedObject as e:
        return deny(f"malformed {review.kind.get('kind') or 'object'}: {e}", code=400)
    except Exception:
        log.exception("rule set failed", webhook=rule_set.name, uid=review.uid)
        return Decision(
            False,
            message=f"internal error in {rule_set.name}; see the webhook's logs",
            code=500,
            reason="InternalError",
        )


def answer_review(
    rule_set: RuleSet,
    view: CacheView,
    body: bytes,
    deadline: float | None = None,
    relay: LedgerRelay | None = None,
) -> tuple[Answer, str, str]:
    """The answer, the operation and the decision label (allow, deny, error, bad-request,
    relayed). `relay`: a rule set that takes ledger turns sends the review on to the replica
    holding the namespace's turn, when there is one that answers; what it decides without a
    turn (RuleSet.before_turn) it answers here."""
    try:
        review = parse_review(body, deadline)
    except BadReview as e:
        return bad_request(rule_set, str(e)), "", "bad-request"
    # An advisory rule set (the preemption preview) answers whatever its caches' state: it
    # reads them only to warn, and a warning missing is all that unlisted caches cost it.
    stale = None if rule_set.advisory else cache_refusal(rule_set, view, review.operation)
    decision = None
    writer = relay.writer(review.namespace) if relay and rule_set.ledger_turn and review.namespace else None
    if writer is not None:
        assert relay is not None
        if stale is None and rule_set.before_turn is not None:
            decision = _decided(rule_set, rule_set.before_turn, review, view)
        if decision is None:  # it needs the turn, or caches this replica cannot decide on yet
            relayed = relay.send(writer, rule_set.path, body, deadline)
            if relayed is not None:
                answer = _closing(_json(relayed)) if relay.sheds_connections() else _json(relayed)
                return answer, review.operation, "relayed"
    if decision is None:
        decision = stale or _decided(rule_set, rule_set.handler, review, view)
    if rule_set.advisory and not decision.allowed:
        decision = Decision(True)  # it never refuses: an error of its own costs a warning only
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
    return _json(orjson.dumps(review_response(review, decision))), review.operation, label


def cache_refusal(rule_set: RuleSet, view: CacheView, operation: str = "") -> Decision | None:
    """A 503 "retry" when the caches the rule set reads cannot be trusted for it, else None.

    Not listed yet: nobody answers (priogate is starting). Stale (listed once, its watch down
    since): a rule set that answers_from_stale answers from the last contents; the others, whose
    decisions reserve or spend quota, refuse rather than decide on data that may be behind.
    Either way a cache that just went wrong gets CACHE_SYNC_GRACE_SECONDS to come back, so a
    watch reconnect is not a refusal; one stale for longer is refused at once. A DELETE only
    frees (podgroup_quota releases on a fresh read of the ledger, not the caches): refusing it
    would block deletions and free nothing, so it is answered from stale caches too."""
    caches = view.caches
    if rule_set.answers_from_stale or operation == "DELETE":
        waiting = view.unlisted(rule_set.needs)
        if not waiting:
            return None
        forbid_waiting(f"caches to list: {', '.join(waiting)}")
        if all(caches[n].wait_listed(CACHE_SYNC_GRACE_SECONDS) for n in waiting):
            return None
    else:
        waiting = view.unsynced(rule_set.needs)
        if not waiting:
            return None
        forbid_waiting(f"caches to come back: {', '.join(waiting)}")
        if all(
            n in caches
            and caches[n].stale_seconds() < CACHE_SYNC_GRACE_SECONDS
            and caches[n].wait_synced(CACHE_SYNC_GRACE_SECONDS)
            for n in waiting
        ):
            return None
    unlisted = view.unlisted(waiting)
    if unlisted:
        message = f"priogate is starting: its {', '.join(unlisted)} cache is not synced yet; retry shortly"
    else:
        stale = [caches[n] for n in waiting if not caches[n].synced]
        if not stale:  # came back meanwhile
            return None
        detail = "; ".join(f"{c.name} for {c.stale_seconds():.0f} s ({c.state().reason})" for c in stale)
        message = (
            f"priogate's view of the cluster is stale ({detail}): {rule_set.name} does not decide on"
            " data that may be behind the API server; retry shortly"
        )
    return deny(message, code=503, reason="ServiceUnavailable")


def bad_request(rule_set: RuleSet, reason: str) -> Answer:
    metrics.BAD_REQUESTS.labels(rule_set.name).inc()
    log.info("bad request", webhook=rule_set.name, reason=reason)
    return plain(400, reason)


def _mimetype(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


class AdmissionEndpoints:
    """WSGI middleware: POSTs to a registered rule set's path are answered here; any other
    request goes on to `fallback` (the Flask app)."""

    def __init__(self, rule_sets: Sequence[RuleSet], view: CacheView, fallback: WSGIApp) -> None:
        self.view = view
        self.fallback = fallback
        # Label lookups cost more than the updates themselves; do them once.
        self.by_path = {
            r.path: (r, metrics.IN_FLIGHT.labels(r.name), metrics.LATENCY.labels(r.name)) for r in rule_sets
        }
        self._request_counters: dict[tuple[str, str, str], Any] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        bound = self.by_path.get(environ.get("PATH_INFO", ""))
        if bound is None:
            return self.fallback(environ, start_response)
        status, headers, body = self.serve(environ, *bound)
        start_response(status, headers)
        return [body]

    def serve(self, environ: dict[str, Any], rule_set: RuleSet, in_flight: Any, latency: Any) -> Answer:
        if environ.get("REQUEST_METHOD") != "POST":
            return plain(405, "method not allowed: admission endpoints take POST", [("Allow", "POST")])
        started = time.perf_counter()
        # The caller's timeout runs from when it sent the request; a request that waited for a free
        # thread has lost that wait too, which the server cannot see (docs/serving.md, "Admission
        # deadlines").
        arrived = environ.get(ARRIVED_ENVIRON) or time.monotonic()
        in_flight.inc()
        handed_on = False
        try:
            mimetype = _mimetype(environ.get("CONTENT_TYPE", ""))
            if mimetype != "application/json":
                return bad_request(rule_set, f"Content-Type must be application/json, got {mimetype!r}")
            try:
                body = read_body(environ)
            except TooLarge:
                return plain(413, f"body larger than {MAX_BODY_BYTES} bytes")
            except BadReview as e:
                return bad_request(rule_set, str(e))
            timeout = caller_timeout(environ.get("QUERY_STRING", ""))
            deadline = None if timeout is None else arrived + timeout
            # A review relayed here by another replica is decided here, never relayed again.
            relay = None if environ.get(RELAYED_ENVIRON) else self.view.relay
            try:
                answer, operation, decision = answer_review(rule_set, self.view, body, deadline, relay)
            except WouldBlock:
                handed_on = True
                raise
            self._count(rule_set.name, operation, decision)
            seconds = time.perf_counter() - started
            if seconds > SLOW_SECONDS:
                log.warning(
                    "slow admission",
                    webhook=rule_set.name,
                    operation=operation,
                    decision=decision,
                    seconds=round(seconds, 3),
                )
            return answer
        finally:
            in_flight.dec()
            if not handed_on:  # an attempt on the event loop is measured on the thread it goes to
                latency.observe(time.perf_counter() - started)

    def _count(self, *labels: str) -> None:
        counter = self._request_counters.get(labels)
        if counter is None:
            counter = self._request_counters.setdefault(labels, metrics.REQUESTS.labels(*labels))
        counter.inc()
