"""The few API calls the launcher makes (readiness, nodes, webhook configurations, probes), as
plain JSON over `requests` with the admin client certificate; and etcd's v3 JSON gateway, which
the e2e tests use to seed states that admission refuses on purpose (e.g. two globalDefaults)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import requests

from localcluster.pki import Pki

JSON = dict[str, Any]


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.status = status
        self.body = body
        try:
            self.message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            self.message = body
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


class Api:
    def __init__(self, server: str, pki: Pki, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        # Ignore REQUESTS_CA_BUNDLE and proxy variables: this CA, and loopback only.
        self.session.trust_env = False
        self.session.verify = str(pki.ca_crt)
        self.session.cert = (str(pki.admin_crt), str(pki.admin_key))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body)
        r = self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers={"Content-Type": content_type, "Accept": "application/json"},
            timeout=self.timeout,
        )
        if r.status_code >= 400:
            raise ApiError(method, path, r.status_code, r.text)
        if r.headers.get("Content-Type", "").startswith("application/json"):
            return r.json()
        return r.text

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def create(self, path: str, body: JSON, dry_run: bool = False) -> JSON:
        return self.request("POST", path, body, params={"dryRun": "All"} if dry_run else None)

    def create_or_replace(self, path: str, body: JSON) -> JSON:
        try:
            return self.create(path, body)
        except ApiError as e:
            if e.status != 409:
                raise
        name = body["metadata"]["name"]
        current = self.get(f"{path}/{name}")
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
        }
        return self.request("PUT", f"{path}/{name}", body)

    def delete(self, path: str, missing_ok: bool = True) -> None:
        try:
            self.request("DELETE", path)
        except ApiError as e:
            if not (missing_ok and e.status == 404):
                raise

    def ready(self) -> bool:
        r = self.session.get(self.server + "/readyz", timeout=5)
        return r.status_code == 200

    def metrics(self) -> str:
        r = self.session.get(self.server + "/metrics", timeout=self.timeout)
        r.raise_for_status()
        return r.text


def metric_sum(text: str, name: str, labels: Mapping[str, str]) -> float:
    """Sum of the samples of a Prometheus text metric whose labels include `labels`."""
    total = 0.0
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if not line.startswith(name + "{"):
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

    def delete(self, key: str) -> int:
        r = self.session.post(self.url + "/v3/kv/deleterange", json={"key": self._b64(key)}, timeout=10)
        r.raise_for_status()
        return int(r.json().get("deleted", 0))
