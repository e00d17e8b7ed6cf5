"""A thin JSON client over the official `kubernetes` client's transport.

The generated models are slow to deserialize and lock-contended (kubernetes-client/python
#1867), and our rules work on plain dicts anyway, so every call here returns the API server's
JSON as dicts. Authentication, TLS and kubeconfig handling stay the official client's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from priogate import api_json

JSON = dict[str, Any]
Timeout = float | tuple[float, float]


@dataclass
class ApiError(Exception):
    status: int
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"


def load_client(kubeconfig: str | None = None, *, pool_size: int = 16) -> ApiClient:
    """From a kubeconfig file, else in-cluster configuration (service account)."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        k8s_config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        k8s_config.load_incluster_config(client_configuration=configuration)
    # Several threads (watches, reconcilers) share one client.
    configuration.connection_pool_maxsize = pool_size
    return ApiClient(k8s.ApiClient(configuration))


class ApiClient:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self._api = api_client

    @property
    def host(self) -> str:
        """The API server's URL."""
        return str(self._api.configuration.host)

    def set_default_header(self, name: str, value: str) -> None:
        """A header sent with every request (impersonation)."""
        self._api.set_default_header(name, value)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: Timeout | None = 30,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        _, url, headers, body, _ = self._api.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self._api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
        except k8s.ApiException as e:
            raise _api_error(e.status or 0, e.reason or "", e.body) from None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: Timeout | None = 30,
    ) -> JSON:
        data = self._read(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        return api_json.loads(data) if data else {}

    def _read(self, method: str, path: str, **kw: Any) -> bytes:
        """The whole response body; an error status raises ApiError."""
        response = self._send(method, path, **kw)
        data = response.read()
        if response.status >= 400:
            raise _api_error(response.status, response.reason or "", data)
        return data

    def stream_lines(
        self,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        timeout: Timeout | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> Iterator[bytes]:
        """GET a streaming endpoint (a watch) and yield its newline-delimited JSON lines.
        `on_open` is called once the server has answered 200, before any line arrives."""
        response = self._send("GET", path, query=query, timeout=timeout)
        raw = response.response
        try:
            if response.status >= 400:
                raise _api_error(response.status, response.reason or "", raw.read())
            if on_open is not None:
                on_open()
            for line in raw:
                if line.strip():
                    yield line
        finally:
            raw.release_conn()

    def get(self, path: str, **kw: Any) -> JSON:
        return self.request("GET", path, **kw)

    def list_all(self, path: str, *, timeout: Timeout | None = (5, 30)) -> list[JSON]:
        """Every item of a collection, read from etcd: a LIST without resourceVersion is a quorum
        read of the latest state, never the API server's watch cache (Kubernetes API concepts,
        "Resource versions": unset means "Most Recent"); the pages of a paginated LIST come from
        the first page's snapshot. For decisions that free something (a reservation) and must
        not rest on a cache that may be behind."""
        items: list[JSON] = []
        token = ""
        while True:
            query = [("limit", "500")] + ([("continue", token)] if token else [])
            page = self.get(path, query=query, timeout=timeout)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue", "")
            if not token:
                return items

    def get_text(
        self, path: str, *, query: Sequence[tuple[str, str]] = (), timeout: Timeout | None = 30
    ) -> str:
        """GET an endpoint that answers plain text (/readyz, /metrics, a pod's log)."""
        return self._read("GET", path, query=query, timeout=timeout).decode(errors="replace")

    def create(self, path: str, body: Mapping[str, Any], *, dry_run: bool = False) -> JSON:
        return self.request("POST", path, body=body, query=[("dryRun", "All")] if dry_run else ())

    def replace(self, path: str, body: Mapping[str, Any]) -> JSON:
        return self.request("PUT", path, body=body)

    def delete(self, path: str, *, preconditions: Mapping[str, str] | None = None) -> JSON:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            body["preconditions"] = dict(preconditions)
        return self.request("DELETE", path, body=body)


def _api_error(status: int, reason: str, body: bytes | str | None) -> ApiError:
    message = ""
    if body:
        try:
            doc = api_json.loads(body)
            message = doc.get("message", "") if isinstance(doc, dict) else str(doc)
        except ValueError:
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    return ApiError(status, reason, message[:500])


def resource_path(
    group_version: str, plural: str, namespace: str | None = None, name: str | None = None
) -> str:
    """/api/v1/... for the core group, /apis/GROUP/VERSION/... otherwise."""
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base
