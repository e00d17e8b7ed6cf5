"""The preempt extender the controller serves (controller/extender.py): both spellings of
kube-scheduler's request, 400 for what it cannot read, the scheduler's candidates unchanged with
the default policy, the stale nomination cleared by the leader only, and HTTPS end to end."""

from __future__ import annotations

import http.client
import json
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from certs.issue import issue_ca, issue_leaf
from controller.extender import UidIndex, parse_request
from controller.extender_server import check_tls, serve
from priogate.kube.client import ApiError
from tests.builders import podgroup
from tests.unit.gang_cluster import EVENTS_PATH, NS, pod_path
from tests.unit.pod_cluster import cluster, pending, running

OPT_OUT = {"priogate.io/allow-preemption": "false"}


def go_body(pod: dict[str, Any], victims: dict[str, list[str]], violations: int = 0) -> bytes:
    """The body kube-scheduler 1.36 sends with nodeCacheCapable: Go's field names."""
    return json.dumps(
        {
            "Pod": pod,
            "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": violations}
                for node, uids in victims.items()
            },
        }
    ).encode()


def test_both_spellings_and_whole_pods_are_read() -> None:
    lower = {
        "pod": {"metadata": {"name": "hi", "namespace": NS}},
        "nodeNameToMetaVictims": {"n1": {"pods": [{"uid": "u1"}], "numPDBViolations": 2}},
    }
    request = parse_request(json.dumps(lower).encode())
    assert request.candidates == {"n1": (("u1",), 2)} and request.meta
    whole = {
        "Pod": {"metadata": {"name": "hi"}},
        "NodeNameToVictims": {
            "n1": {"Pods": [{"metadata": {"name": "v", "namespace": NS, "uid": "u1"}}], "NumPDBViolations": 0}
        },
    }
    request = parse_request(json.dumps(whole).encode())
    assert request.candidates == {"n1": (("u1",), 0)} and request.names == {"u1": f"{NS}/v"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "JSON object"),
        (b"{}", "Pod"),
        (b'{"Pod": {"metadata": {}}}', "metadata.name"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNameToMetaVictims": []}', "expected an object"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}', "no UID"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNameToMetaVictims": {"n1": {"Pods": 3}}}', "a list"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_bad_requests_get_400_with_a_message(body: bytes, message: str) -> None:
    c = cluster(running("v", 1), pending("hi", 10))
    code, reply = c.extender().handle(body)
    assert code == 400 and message in reply["error"]


def test_the_default_policy_answers_the_schedulers_candidates() -> None:
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    code, reply = c.extender().handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-v"]}, 1))
    assert code == 200
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-v"}], "NumPDBViolations": 1}}}


def test_an_unknown_victim_uid_drops_its_node() -> None:
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    code, reply = c.extender().handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-nobody"]}))
    assert code == 200 and reply == {"NodeNameToMetaVictims": {}}


def test_other_victims_are_answered_by_uid() -> None:
    # The scheduler took the opted-out pod; on a node the engine sees whole, another one goes.
    opted = running("opted", 1, cpu="2", start=5)
    opted["metadata"]["labels"] = OPT_OUT
    c = cluster(running("keep", 1, cpu="2", start=0), opted, pending("hi", 10, cpu="2"))
    _, reply = c.extender().handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-opted"]}))
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-keep"}], "NumPDBViolations": 0}}}


def nominated_opted_out_cluster(leader: bool = True) -> Any:
    victim = running("opted", 1, cpu="4")
    victim["metadata"]["labels"] = OPT_OUT
    # hostPorts on the victim: the engine cannot pick others, the node goes
    victim["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    c = cluster(victim, pending("hi", 10, nominated="n1"))
    c.leader = leader
    return c


def wait_for(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_no_node_kept_clears_a_stale_nomination_with_a_uid_precondition_and_says_why() -> None:
    c = nominated_opted_out_cluster()
    extender = c.extender()
    code, reply = extender.handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-opted"]}))
    assert code == 200 and reply == {"NodeNameToMetaVictims": {}}
    extender.pool.shutdown(wait=True)
    patches = [w for w in c.client.writes if w.path == pod_path("hi") + "/status"]
    assert len(patches) == 1
    assert patches[0].body == {"status": {"nominatedNodeName": None}, "metadata": {"uid": "uid-hi"}}
    events = [w.body for w in c.client.writes if w.path == EVENTS_PATH]
    assert [e["reason"] for e in events] == ["PreemptionBlocked"]
    assert "opted out" in events[0]["note"] and "hostPorts" in events[0]["note"]


def test_the_same_reason_is_told_once() -> None:
    c = nominated_opted_out_cluster()
    extender = c.extender()
    for _ in range(3):
        extender.handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-opted"]}))
    extender.pool.shutdown(wait=True)
    assert len([w for w in c.client.writes if w.path == EVENTS_PATH]) == 1


def test_a_replica_that_does_not_lead_answers_and_writes_nothing() -> None:
    c = nominated_opted_out_cluster(leader=False)
    extender = c.extender()
    code, reply = extender.handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-opted"]}))
    extender.pool.shutdown(wait=True)
    assert code == 200 and reply == {"NodeNameToMetaVictims": {}}
    assert c.client.writes == []


def test_a_pod_gone_meanwhile_is_skipped() -> None:
    c = nominated_opted_out_cluster()
    c.client.remove(pod_path("hi"))
    extender = c.extender()
    extender.handle(go_body(pending("hi", 10, nominated="n1"), {"n1": ["uid-opted"]}))
    extender.pool.shutdown(wait=True)  # a 404 is "already done", nothing raised


def test_uid_index_follows_events() -> None:
    c = cluster(running("v", 1))
    index = UidIndex.attach(c.caches.pods)
    assert index.get("uid-v") == f"{NS}/v"
    c.caches.pods.apply_event("ADDED", running("w", 1))
    assert index.get("uid-w") == f"{NS}/w"
    c.caches.pods.apply_event("DELETED", running("w", 1))
    assert index.get("uid-w") is None


def test_served_over_https(tmp_path: Path) -> None:
    ca = issue_ca()
    leaf = issue_leaf(ca, "priogate-controller", dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    c = cluster(running("v", 1, cpu="4"), pending("hi", 10))
    server = serve("127.0.0.1:0", str(cert), str(key), c.extender())
    try:
        port = server.server_address[1]
        # A client that does not speak TLS fails its handshake alone.
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("POST", "/scheduler/preempt", b"{}")
            plain.getresponse()
        plain.close()
        context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        body = go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-v"]})
        conn.request("POST", "/scheduler/preempt", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["NodeNameToMetaVictims"]["n1"]["Pods"] == [{"UID": "uid-v"}]
        conn.request("POST", "/scheduler/preempt", b"nope", {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 400 and "not JSON" in json.loads(response.read())["error"]
        conn.request("POST", "/elsewhere", b"{}")
        response = conn.getresponse()
        assert response.status == 404
        response.read()
    finally:
        server.shutdown()


def test_api_errors_other_than_gone_are_logged_not_raised() -> None:
    c = nominated_opted_out_cluster()

    def failing(*args: Any, **kw: Any) -> Any:
        raise ApiError(500, "InternalError", "etcd is away")

    c.client.request = failing  # type: ignore[method-assign]
    extender = c.extender()
    code, _ = extender.handle(go_body(c.client.objects[pod_path("hi")], {"n1": ["uid-opted"]}))
    extender.pool.shutdown(wait=True)
    assert code == 200


def test_a_missing_certificate_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--cert-file"):
        check_tls(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


def test_a_gang_members_nomination_is_left_to_gang_preemption() -> None:
    member = pending("m1", 10, nominated="n1", group="g")
    other = pending("m2", 10, group="g")
    c = cluster(
        running("v", 1, cpu="4"), member, other, groups=(podgroup("g", min_member=2, phase="Inqueue"),)
    )
    extender = c.extender()
    code, reply = extender.handle(go_body(c.client.objects[pod_path("m1")], {"n1": ["uid-v"]}))
    extender.pool.shutdown(wait=True)
    assert code == 200 and reply == {"NodeNameToMetaVictims": {}}
    assert c.client.writes == []  # neither the gang's nomination cleared nor a Warning
