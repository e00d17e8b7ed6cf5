"""The ASGI app (webhook/asgi.py) over a recording WSGI app: what runs on the loop and what on
the threads, the body's cap and deadline, the environ it builds, the lifespan."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from webhook.asgi import AsgiApp, wsgi_environ
from webhook.endpoints import ARRIVED_ENVIRON, MAX_BODY_BYTES


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, Any], bytes, str]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body = environ["wsgi.input"].read()
        self.calls.append((environ, body, threading.current_thread().name))
        start_response("200 OK", [("Content-Type", "text/plain"), ("X-Seen", str(len(body)))])
        return [b"seen ", body]


def scope(path: str = "/mutate/pods", method: str = "POST", headers: list | None = None) -> dict:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"timeout=10s",
        "headers": headers or [(b"content-type", b"application/json")],
        "server": ("127.0.0.1", 8443),
        "client": ("127.0.0.1", 50000),
        "scheme": "https",
        "http_version": "1.1",
    }


def run(app: AsgiApp, scope: dict, messages: list[dict], delay: float = 0.0) -> list[dict]:
    sent: list[dict] = []

    async def go() -> None:
        queue = list(messages)

        async def receive() -> dict:
            if delay:
                await asyncio.sleep(delay)
            return queue.pop(0) if queue else {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(go())
    return sent


def app_for(wsgi: Recording, inline: frozenset[str] = frozenset(), body_seconds: float = 5.0) -> AsgiApp:
    return AsgiApp(wsgi, lambda path: path in inline, threads=2, body_seconds=body_seconds)


def test_an_inline_path_is_answered_on_the_loop_the_rest_on_the_threads():
    wsgi = Recording()
    app = app_for(wsgi, inline=frozenset({"/mutate/pods"}))
    sent = run(
        app,
        scope(),
        [
            {"type": "http.request", "body": b'{"a"', "more_body": True},
            {"type": "http.request", "body": b": 1}"},
        ],
    )
    assert sent[0]["status"] == 200 and (b"x-seen", b"8") in sent[0]["headers"]
    assert sent[1]["body"] == b'seen {"a": 1}'
    run(app, scope("/validate/podgroups"), [{"type": "http.request", "body": b"{}"}])
    run(app, scope("/mutate/pods", method="GET"), [{"type": "http.request", "body": b""}])
    threads = [name for _, _, name in wsgi.calls]
    assert threads[0] == "MainThread"  # asyncio.run's loop
    assert threads[1].startswith("app") and threads[2].startswith("app")


def test_a_body_over_the_cap_is_refused_unread_or_as_it_grows():
    wsgi = Recording()
    app = app_for(wsgi)
    too_big = [(b"content-length", str(MAX_BODY_BYTES + 1).encode())]
    sent = run(app, scope(headers=too_big), [])
    assert sent[0]["status"] == 413
    chunk = b"x" * (1024 * 1024)
    chunks = [{"type": "http.request", "body": chunk, "more_body": True} for _ in range(4)]
    sent = run(app, scope(), chunks)
    assert sent[0]["status"] == 413 and wsgi.calls == []


def test_a_body_that_does_not_come_within_the_deadline_is_answered_408():
    wsgi = Recording()
    sent = run(
        app_for(wsgi, body_seconds=0.05), scope(), [{"type": "http.request", "body": b"{}"}], delay=0.2
    )
    assert sent[0]["status"] == 408 and b"within 0.05 s" in sent[1]["body"]
    assert wsgi.calls == []


def test_a_client_gone_before_its_body_is_sent_nothing():
    wsgi = Recording()
    assert run(app_for(wsgi), scope(), [{"type": "http.disconnect"}]) == []
    assert wsgi.calls == []


def test_the_environ_carries_the_request_as_wsgi_would():
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"999"),  # the body read decides it
        (b"x-forwarded-for", b"a"),
        (b"x-forwarded-for", b"b"),
        (b"priogate-relayed", b"1"),
    ]
    environ = wsgi_environ(scope(headers=headers), b"{}")
    assert environ["REQUEST_METHOD"] == "POST" and environ["PATH_INFO"] == "/mutate/pods"
    assert environ["QUERY_STRING"] == "timeout=10s"
    assert environ["CONTENT_TYPE"] == "application/json" and environ["CONTENT_LENGTH"] == "2"
    assert environ["HTTP_X_FORWARDED_FOR"] == "a,b" and environ["HTTP_PRIOGATE_RELAYED"] == "1"
    assert environ["wsgi.input"].read() == b"{}" and environ["wsgi.url_scheme"] == "https"
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("127.0.0.1", "8443")


def test_the_arrival_is_taken_before_the_body_is_read():
    wsgi = Recording()
    run(
        app_for(wsgi, inline=frozenset({"/mutate/pods"})),
        scope(),
        [{"type": "http.request", "body": b"{}"}],
        delay=0.1,
    )
    environ = wsgi.calls[0][0]
    assert isinstance(environ[ARRIVED_ENVIRON], float)


def test_lifespan_starts_and_stops_the_periodic_calls():
    ticks: list[int] = []
    app = AsgiApp(
        Recording(), lambda _p: False, threads=1, body_seconds=1.0, every_second=[lambda: ticks.append(1)]
    )
    sent: list[dict] = []

    async def go() -> None:
        messages = asyncio.Queue()
        await messages.put({"type": "lifespan.startup"})

        async def send(message: dict) -> None:
            sent.append(message)

        task = asyncio.create_task(app({"type": "lifespan"}, messages.get, send))
        await asyncio.sleep(1.3)
        await messages.put({"type": "lifespan.shutdown"})
        await task

    asyncio.run(go())
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert ticks == [1]


def test_a_failing_periodic_call_does_not_stop_the_others():
    ticks: list[int] = []

    def fail() -> None:
        raise RuntimeError("boom")

    app = AsgiApp(
        Recording(),
        lambda _p: False,
        threads=1,
        body_seconds=1.0,
        every_second=[fail, lambda: ticks.append(1)],
    )

    async def go() -> None:
        task = asyncio.create_task(app._tick())
        await asyncio.sleep(2.2)
        task.cancel()

    asyncio.run(go())
    assert ticks == [1, 1]


def test_an_inline_admission_that_would_wait_is_answered_again_on_a_thread():
    """A pod naming a class the cache lacks: the priority hook reads it from the API server
    (webhook/class_lookup.py), which the event loop must not wait for. The first try stops
    before the read (webhook/loop.py); the thread's try reads it and answers."""
    import base64
    import json

    from tests.builders import SYSTEM_CLASSES, pod, priority_class
    from tests.reviews import make_view, review
    from webhook.app import create_app
    from webhook.registry import load_rule_sets
    from webhook.server import _inline_paths

    view = make_view(SYSTEM_CLASSES)
    reads: list[str] = []

    class StoredClasses:
        def get(self, path: str, timeout: object = None) -> dict:
            reads.append(threading.current_thread().name)
            return priority_class("created-a-moment-ago", value=4242)

    view.client = StoredClasses()  # type: ignore[assignment]
    flask_app = create_app(view)
    inline = _inline_paths(view, load_rule_sets())
    app = AsgiApp(flask_app.wsgi_app, inline, threads=2, body_seconds=5.0)
    body = json.dumps(review(pod(namespace="team-a", priority_class="created-a-moment-ago"))).encode()
    sent = run(app, scope(), [{"type": "http.request", "body": body}])
    assert sent[0]["status"] == 200
    answer = json.loads(sent[1]["body"])["response"]
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert answer["allowed"] is True and {"op": "add", "path": "/spec/priority", "value": 4242} in patch
    assert len(reads) == 1 and reads[0].startswith("app"), reads  # read once, on a thread
