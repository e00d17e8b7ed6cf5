"""Relaying ledger admissions to the namespace's writer (webhook/ledger_relay.py): who the writer
is (WatchedLedgers.writer_of), the relay against a real TLS server on loopback, and which
requests the admission endpoints relay."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from certs import issue_ca, issue_leaf, write_pem
from certs.issue import has_client_auth
from localcluster.procs import free_ports
from priogate.kube import watched_ledger
from priogate.kube.cache import WatchCache
from priogate.kube.watched_ledger import WatchedLedgers
from priogate.ledger.codec import ledger_object
from priogate.ledger.model import Ledger
from priogate.ledger.turn_order import TURN_ANNOTATION, Turn, peer_of, turn_holder, writer_name
from tests.reviews import make_view, review
from webhook import ledger_relay
from webhook.app import create_app
from webhook.ledger_relay import RELAYED_HEADER, LedgerRelay
from webhook.server import _trust_own_certificate

NS = "team-a"
LEDGER_NS = "priogate-system"


@pytest.mark.parametrize(
    ("writer", "peer"),
    [
        ("10.0.0.7:8444/webhook-abc-12-f00d", ("10.0.0.7", 8444)),
        ("fd00::7:8444/webhook-abc-12-f00d", ("fd00::7", 8444)),
        ("[fd00::7]:8444/p", ("fd00::7", 8444)),
        ("webhook-abc-12-f00d", None),  # a process without a peer address
        ("10.0.0.7/p", None),
        ("10.0.0.7:http/p", None),
        ("10.0.0.7:0/p", None),
        ("10.0.0.7:70000/p", None),
        (":8444/p", None),
        ("", None),
    ],
)
def test_the_peer_address_a_writer_names(writer, peer):
    assert peer_of(writer) == peer


def test_a_writer_name_carries_the_peer_address_when_there_is_one():
    assert writer_name("pod-1-f00d", "10.0.0.7:8444") == "10.0.0.7:8444/pod-1-f00d"
    assert writer_name("pod-1-f00d") == "pod-1-f00d"
    assert peer_of(writer_name("pod-1-f00d", "10.0.0.7:8444")) == ("10.0.0.7", 8444)


def _ledger(writer: str, seq: int, uid: str = "uid-1") -> dict:
    body = ledger_object(
        LEDGER_NS, NS, Ledger({}), None, annotations={TURN_ANNOTATION: Turn(seq, writer).annotation()}
    )
    body["metadata"].update(uid=uid, resourceVersion=str(seq + 1))
    return body


def _watched(objects: list[dict] | None) -> WatchedLedgers:
    return WatchedLedgers(WatchCache.static("ledgers", objects), LEDGER_NS, peer_address="10.0.0.1:8444")


def test_the_writer_is_another_replica_whose_write_the_watch_just_showed():
    watched = _watched([_ledger("10.0.0.2:8444/pod-b", 3)])
    assert watched.writer.startswith("10.0.0.1:8444/")
    assert watched.writer_of(NS) == ("10.0.0.2", 8444)
    assert watched.writer_of("other-namespace") is None  # no ledger: decided where it lands


def test_of_two_active_writers_the_least_by_name_holds_the_turn_whoever_wrote_last():
    # This process (10.0.0.1) and pod-b (10.0.0.2) both wrote a moment ago.
    watched = _watched([_ledger("10.0.0.2:8444/pod-b", 3)])
    watched.written(NS, _ledger(watched.writer, 4), Turn(4, watched.writer))
    assert watched.writer_of(NS) is None  # this process's name is the least: it decides
    # Seen from pod-b, the same two writers: it relays to this process, though it wrote too.
    other = WatchedLedgers(
        WatchCache.static("ledgers", [_ledger(watched.writer, 4)]), LEDGER_NS, "10.0.0.2:8444/b"
    )
    other.written(NS, _ledger("10.0.0.2:8444/b", 5), Turn(5, "10.0.0.2:8444/b"))
    assert other.writer_of(NS) == ("10.0.0.1", 8444)
    # So this process holds a turn, and keeps its connections; pod-b, though it wrote, does not.
    assert watched.holds_a_turn() and not other.holds_a_turn()


def test_a_process_that_wrote_first_holds_the_turn_no_longer_once_a_lesser_writer_writes():
    # pod-b writes a new ledger before anyone else: it holds the turn...
    b = WatchedLedgers(WatchCache.static("ledgers", []), LEDGER_NS, "10.0.0.2:8444/b")
    b.written(NS, _ledger(b.writer, 1), Turn(1, b.writer))
    assert b.holds_a_turn()
    # ...until its watch shows the least-named replica writing it too.
    b.cache.apply_event("MODIFIED", _ledger("10.0.0.1:8444/a", 2))
    assert not b.holds_a_turn()


def test_a_process_holds_a_turn_for_the_fresh_window_after_writing_as_its_holder(monkeypatch):
    watched = _watched([])
    assert not watched.holds_a_turn()  # it wrote nothing
    watched.cache.apply_event("ADDED", _ledger(watched.writer, 3))
    watched.written(NS, _ledger(watched.writer, 3), Turn(3, watched.writer))
    assert watched.holds_a_turn()
    monkeypatch.setattr(watched_ledger, "WRITER_FRESH_SECONDS", 0.0)
    time.sleep(0.01)
    assert not watched.holds_a_turn()


def test_no_writer_to_relay_to_when_only_this_process_writes():
    watched = _watched([])
    watched.cache.apply_event("ADDED", _ledger(watched.writer, 3))
    watched.written(NS, _ledger(watched.writer, 3), Turn(3, watched.writer))
    assert watched.writer_of(NS) is None


@pytest.mark.parametrize(
    ("seen", "holder"),
    [
        ({}, None),
        ({"10.0.0.2:8444/b": 9.5}, "10.0.0.2:8444/b"),
        ({"10.0.0.2:8444/b": 9.5, "10.0.0.1:8444/a": 9.9}, "10.0.0.1:8444/a"),
        ({"10.0.0.2:8444/b": 9.5, "10.0.0.1:8444/a": 7.0}, "10.0.0.2:8444/b"),  # a idle: b holds it
        ({"10.0.0.1:8444/a": 7.0}, None),
    ],
)
def test_the_turn_holder_is_the_least_writer_seen_within_the_fresh_window(seen, holder):
    assert turn_holder(seen, now=10.0, fresh=2.0) == holder


def test_no_writer_without_an_address_an_unsynced_watch_or_a_write_long_ago(monkeypatch):
    assert _watched([_ledger("pod-b-without-address", 3)]).writer_of(NS) is None
    assert _watched(None).writer_of(NS) is None  # never listed
    watched = _watched([_ledger("10.0.0.2:8444/pod-b", 3)])
    assert watched.writer_of(NS) == ("10.0.0.2", 8444)
    monkeypatch.setattr(watched_ledger, "WRITER_FRESH_SECONDS", 0.0)
    time.sleep(0.01)
    assert watched.writer_of(NS) is None  # the same stamp, seen too long ago


# ---- the relay against a real TLS server ------------------------------------------------------


class _Writer(http.server.BaseHTTPRequestHandler):
    status = 200
    seen: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.seen.append((self.path, dict(self.headers), body))
        answer = json.dumps({"answered-by": "writer"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args: object) -> None:
        return


def _answer(
    relay: LedgerRelay, path: str, namespace: str, body: bytes, deadline: float | None
) -> bytes | None:
    """What the admission endpoints do with a review (webhook/endpoints.py answer_review)."""
    address = relay.writer(namespace)
    return None if address is None else relay.send(address, path, body, deadline)


def _pair(directory: Path, name: str) -> tuple[Path, Path]:
    leaf = issue_leaf(issue_ca(f"{name}-ca"), name, ip_addresses=["127.0.0.1"], client=True)
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    write_pem(cert, leaf.cert_pem)
    write_pem(key, leaf.key_pem, private=True)
    return cert, key


@pytest.fixture
def serving(tmp_path: Path) -> Iterator:
    """serving(cert, key, status) -> (port, requests seen): a writer replica on loopback."""
    servers = []

    def start(cert: Path, key: Path, status: int = 200, client_ca: Path | None = None) -> tuple[int, list]:
        handler = type("Handler", (_Writer,), {"status": status, "seen": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            # As the webhook requiring client certificates trusts them (webhook/server.py).
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cafile=client_ca)
            _trust_own_certificate(context, str(cert))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server.server_address[1], handler.seen

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_relay_reaches_a_writer_serving_the_same_certificate(tmp_path, serving):
    cert, key = _pair(tmp_path, "priogate-webhook")
    port, seen = serving(cert, key)
    relay = LedgerRelay(lambda ns: ("127.0.0.1", port) if ns == NS else None, str(cert), str(key))
    deadline = time.monotonic() + 10
    assert json.loads(_answer(relay, "/validate/podgroup-quota", NS, b'{"x": 1}', deadline)) == {
        "answered-by": "writer"
    }
    path, headers, body = seen[0]
    assert body == b'{"x": 1}' and headers[RELAYED_HEADER] == "1"
    # The writer is told what is left of the caller's deadline, less the answer's way back.
    assert path.startswith("/validate/podgroup-quota?timeout=") and path.endswith("ms")
    assert 7000 < int(path.split("=")[1][:-2]) < 8500
    # No writer for the namespace: decided here, nothing sent.
    assert _answer(relay, "/validate/podgroup-quota", "other", b"{}", deadline) is None
    assert len(seen) == 1


def test_a_writer_with_another_certificate_gets_nothing_and_is_left_alone_for_a_while(tmp_path, serving):
    ours, our_key = _pair(tmp_path, "priogate-webhook")
    theirs, their_key = _pair(tmp_path, "impostor")
    port, seen = serving(theirs, their_key)
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(ours), str(our_key))
    assert _answer(relay, "/validate/podgroup-quota", NS, b"{}", time.monotonic() + 10) is None
    assert seen == []  # the handshake failed before any request was sent
    assert ("127.0.0.1", port) in relay._failed


def test_only_the_serving_certificate_is_trusted_not_the_chain_after_it(tmp_path, serving):
    """A serving file with its chain (leaf, then its CA): another leaf the same CA signed is not
    the writer this replica trusts."""
    ca = issue_ca("shared-issuer")
    ours = issue_leaf(ca, "priogate-webhook", ip_addresses=["127.0.0.1"])
    other = issue_leaf(ca, "someone-else", ip_addresses=["127.0.0.1"])
    chain = tmp_path / "ours.crt"
    chain.write_bytes(ours.cert_pem + ca.cert_pem)
    other_cert, other_key = tmp_path / "other.crt", tmp_path / "other.key"
    write_pem(other_cert, other.cert_pem)
    write_pem(other_key, other.key_pem, private=True)
    our_key = tmp_path / "ours.key"
    write_pem(our_key, ours.key_pem, private=True)
    port, seen = serving(other_cert, other_key)
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(chain), str(our_key))
    assert _answer(relay, "/p", NS, b"{}", time.monotonic() + 10) is None
    assert seen == []
    # The same file trusts its own leaf.
    port, seen = serving(chain, our_key)
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(chain), str(our_key))
    assert _answer(relay, "/p", NS, b"{}", time.monotonic() + 10) is not None
    assert len(seen) == 1


def test_a_writer_requiring_client_certificates_is_relayed_to_with_the_serving_certificate(tmp_path, serving):
    cert, key = _pair(tmp_path, "priogate-webhook")
    client_ca = issue_ca("kube-apiserver-client-ca")
    write_pem(tmp_path / "client-ca.crt", client_ca.cert_pem)
    port, seen = serving(cert, key, client_ca=tmp_path / "client-ca.crt")
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(cert), str(key))
    assert _answer(relay, "/p", NS, b"{}", time.monotonic() + 10) is not None
    assert len(seen) == 1
    # What it takes: its certificate as the client's. A serving certificate that may not
    # authenticate clients (no clientAuth usage) is refused, and the admission decided here.
    server_only = issue_leaf(issue_ca("server-only-ca"), "priogate-webhook", ip_addresses=["127.0.0.1"])
    assert not has_client_auth(server_only.cert_pem) and has_client_auth(cert.read_bytes())
    write_pem(tmp_path / "server-only.crt", server_only.cert_pem)
    write_pem(tmp_path / "server-only.key", server_only.key_pem, private=True)
    cert, key = tmp_path / "server-only.crt", tmp_path / "server-only.key"
    port, seen = serving(cert, key, client_ca=tmp_path / "client-ca.crt")
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(cert), str(key))
    assert _answer(relay, "/p", NS, b"{}", time.monotonic() + 10) is None
    assert seen == [] and ("127.0.0.1", port) in relay._failed


def test_a_writer_that_fails_is_backed_off_then_tried_again(tmp_path, serving, monkeypatch):
    cert, key = _pair(tmp_path, "priogate-webhook")
    port, seen = serving(cert, key, status=500)
    now = [100.0]
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(cert), str(key), clock=lambda: now[0])
    assert _answer(relay, "/p", NS, b"{}", None) is None  # answered 500: decided here
    assert len(seen) == 1
    assert _answer(relay, "/p", NS, b"{}", None) is None
    assert len(seen) == 1  # backed off: not tried again
    now[0] += ledger_relay.RELAY_BACKOFF_SECONDS + 0.1
    assert _answer(relay, "/p", NS, b"{}", None) is None
    assert len(seen) == 2


def test_nothing_listening_or_no_time_left_means_deciding_here(tmp_path):
    cert, key = _pair(tmp_path, "priogate-webhook")
    port = free_ports(1)[0]
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(cert), str(key))
    assert _answer(relay, "/p", NS, b"{}", time.monotonic() + 10) is None
    relay = LedgerRelay(lambda _ns: ("127.0.0.1", port), str(cert), str(key))
    started = time.monotonic()
    assert _answer(relay, "/p", NS, b"{}", time.monotonic() + 1.0) is None  # within the answer margin
    assert relay._failed == {} and time.monotonic() - started < 0.1


# ---- which admissions the endpoints relay ------------------------------------------------------


class _RecordingRelay:
    def __init__(self, sheds: bool = True) -> None:
        self.calls: list[tuple[str, str]] = []
        self.sheds = sheds

    def sheds_connections(self) -> bool:
        return self.sheds

    def writer(self, namespace: str) -> tuple[str, int]:
        return (namespace, 8444)

    def send(self, address: tuple[str, int], path: str, body: bytes, deadline: float | None) -> bytes:
        self.calls.append((path, address[0]))
        uid = json.loads(body)["request"]["uid"]
        return json.dumps({"response": {"uid": uid, "allowed": False, "by": "writer"}}).encode()


def _group() -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": NS},
        "spec": {"minMember": 1, "minResources": {"cpu": "1"}},
    }


def test_only_ledger_turns_are_relayed_and_a_relayed_review_never_again():
    view = make_view()
    relay = _RecordingRelay()
    view.relay = relay  # type: ignore[assignment]
    app = create_app(view)
    client = app.test_client()
    body = review(_group(), resource="podgroups")
    relayed = client.post("/validate/podgroups", json=body)
    assert relayed.get_json()["response"]["by"] == "writer"
    assert relay.calls == [("/validate/podgroups", NS)]
    # The client is asked to reconnect, so that its next connection may reach the writer.
    assert relayed.headers["Connection"] == "close"
    # Relayed here by another replica: decided here, on a connection kept open.
    decided = client.post("/validate/podgroups", json=body, headers={RELAYED_HEADER: "1"})
    assert "by" not in decided.get_json()["response"]
    assert "Connection" not in decided.headers
    # A rule set that takes no ledger turn is never relayed.
    pod = {"metadata": {"name": "p", "namespace": NS}, "spec": {"containers": [{"name": "c"}]}}
    client.post("/mutate/pods", json=review(pod))
    assert len(relay.calls) == 1
    # A replica that holds another namespace's turn keeps the connection.
    relay.sheds = False
    relayed = client.post("/validate/podgroups", json=body)
    assert relayed.get_json()["response"]["by"] == "writer" and "Connection" not in relayed.headers


def test_what_needs_no_turn_is_answered_where_it_lands_not_relayed():
    """A claim the cached stored groups already leave no room for, or a malformed one, is
    refused by the replica it reaches: only admissions that need the turn go to its holder."""
    quota = {"metadata": {"name": "q", "namespace": NS}, "spec": {"hard": {"cpu": "2"}}}
    stored = {**_group(), "metadata": {"name": "stored", "namespace": NS, "uid": "u-stored"}}
    stored["spec"] = {"minMember": 1, "minResources": {"cpu": "2"}}
    view = make_view(quotas=[quota], podgroups=[stored])
    relay = _RecordingRelay()
    view.relay = relay  # type: ignore[assignment]
    client = create_app(view).test_client()
    answered = client.post("/validate/podgroups", json=review(_group(), resource="podgroups")).get_json()
    assert (
        answered["response"]["allowed"] is False
        and "exceeded quota" in answered["response"]["status"]["message"]
    )
    malformed = {**_group(), "spec": {"minMember": 1, "minResources": {"cpu": "-1"}}}
    answered = client.post("/validate/podgroups", json=review(malformed, resource="podgroups")).get_json()
    assert answered["response"]["status"]["code"] == 422
    assert relay.calls == []
    # One that fits what is stored needs the turn: relayed.
    small = {**_group(), "spec": {"minMember": 1, "minResources": {"cpu": "0"}}}
    answered = client.post("/validate/podgroups", json=review(small, resource="podgroups")).get_json()
    assert answered["response"]["by"] == "writer" and relay.calls == [("/validate/podgroups", NS)]
