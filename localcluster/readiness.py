"""The checks the local cluster polls while it starts: a control-plane component's /healthz, a
plain-HTTP endpoint's 200, and the kwok and real nodes' Ready condition."""

from __future__ import annotations

import http.client
import ssl

import requests

from priogate.kube.client import ApiClient


def healthz_ok(port: int) -> bool:
    # The component's serving certificate is self-signed in memory; this only asks "are you up".
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ssl._create_unverified_context())
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def http_ok(url: str) -> bool:
    try:
        return requests.get(url, timeout=3, proxies={"http": "", "https": ""}).status_code == 200
    except requests.RequestException:
        return False


def fake_nodes_ready(api: ApiClient, count: int) -> bool:
    """At least `count` kwok nodes are Ready and untainted."""
    items = api.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
    ready = 0
    for node in items:
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        tainted = any(t.get("effect") == "NoSchedule" for t in node.get("spec", {}).get("taints", []))
        ready += conditions.get("Ready") == "True" and not tainted
    return ready >= count


def node_ready(api: ApiClient, name: str) -> bool:
    node = api.get(f"/api/v1/nodes/{name}")
    conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"
