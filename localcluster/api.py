"""Launcher helpers over priogate's API client (create-or-replace, delete-if-present, readiness),
Prometheus text parsing, and etcd's v3 JSON gateway, which the e2e tests use to seed states that
admission refuses on purpose (e.g. two globalDefaults)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import requests

from priogate.kube.client import ApiClient, ApiError

JSON = dict[str, Any]


def create_or_replace(client: ApiClient, path: str, body: JSON) -> JSON:
    """Create, or replace what is there (the launcher re-applies its own objects on restart)."""
    for _ in range(5):
        try:
            return client.create(path, body)
        except ApiError as e:
            if e.status != 409:
                raise
        name = body["metadata"]["name"]
        current = client.get(f"{path}/{name}")
        meta = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        try:
            return client.replace(f"{path}/{name}", {**body, "metadata": meta})
        except ApiError as e:
            if e.status not in (404, 409):  # deleted or changed meanwhile: start over
                raise
    raise RuntimeError(f"{path}/{body['metadata']['name']} kept changing; retry")


def create_if_absent(client: ApiClient, path: str, body: JSON) -> None:
    """Create, leaving what is there alone (an object another component owns once written)."""
    try:
        client.create(path, body)
    except ApiError as e:
        if e.status != 409:
            raise


def update(client: ApiClient, path: str, change: Callable[[JSON], object], tries: int = 10) -> JSON:
    """Read `path`, apply `change` to it in place and write it back with the resourceVersion
    read; read again and retry on 409 (a controller wrote it meanwhile)."""
    for _ in range(tries):
        current = client.get(path)
        change(current)
        try:
            return client.replace(path, current)
        except ApiError as e:
            if e.status != 409:
                raise
    raise RuntimeError(f"{path} kept changing; retry")


def delete_if_present(client: ApiClient, path: str) -> None:
    try:
        client.delete(path)
    except ApiError as e:
        if e.status != 404:
            raise


def apiserver_ready(client: ApiClient) -> bool:
    return client.get_text("/readyz", timeout=5).strip() == "ok"


def metric_sum(text: str, name: str, labels: Mapping[str, str]) -> float:
    """Sum of the samples of a Prometheus text metric whose labels include `labels`."""
    total = 0.0
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if not line.startswith((name + "{", name + " ")):  # labelled, or a sample without labels
            continue
        label_part, _, value = line.rpartition(" ")
        if all(w in label_part for w in wanted):
            total += float(value)
    return total


class Etcd:
    """etcd's v3 JSON gateway (keys and values are base64)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.trust_env = False

    @staticmethod
    def _b64(s: str | bytes) -> str:
        return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()

    def healthy(self) -> bool:
        r = self.session.get(self.url + "/health", timeout=5)
        return r.status_code == 200 and r.json().get("health") == "true"

    def put(self, key: str, value: bytes) -> None:
        r = self.session.post(
            self.url + "/v3/kv/put", json={"key": self._b64(key), "value": self._b64(value)}, timeout=10
        )
        r.raise_for_status()

    def compact(self) -> int:
        """Advance the revision and compact history up to it, so a watch from any resourceVersion
        handed out before fails with 410 Gone and its client must relist. Returns the revision."""
        key = "/priogate-localcluster/compact"
        self.put(key, b"x")
        r = self.session.post(self.url + "/v3/kv/range", json={"key": self._b64(key)}, timeout=10)
        r.raise_for_status()
        revision = int(r.json()["header"]["revision"])
        r = self.session.post(
            self.url + "/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=30
        )
        r.raise_for_status()
        return revision

    def delete(self, key: str) -> int:
        r = self.session.post(self.url + "/v3/kv/deleterange", json={"key": self._b64(key)}, timeout=10)
        r.raise_for_status()
        return int(r.json().get("deleted", 0))
