"""An in-memory API server for the reservation record's store: GET of objects and collections,
POST and PUT with kube-apiserver's optimistic concurrency (409 on a stale resourceVersion or an
existing name), DELETE, and a log of every call so tests can say which reads were quorum reads
(no resourceVersion parameter)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from priogate.kube.client import ApiError


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  # item path -> object
        self.calls: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []
        self._version = 0
        self._lock = threading.Lock()

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def put_object(self, collection: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store `obj` in `collection` as if created by someone else (no admission)."""
        with self._lock:
            stored = copy.deepcopy(dict(obj))
            stored.setdefault("metadata", {})["resourceVersion"] = self._next_version()
            self.objects[f"{collection}/{stored['metadata']['name']}"] = stored
            return copy.deepcopy(stored)

    def remove(self, path: str) -> None:
        with self._lock:
            self.objects.pop(path, None)

    def get(self, path: str, *, query: Sequence[tuple[str, str]] = (), **_: Any) -> dict[str, Any]:
        with self._lock:
            self.calls.append(("GET", path, tuple(query)))
            if path in self.objects:
                return copy.deepcopy(self.objects[path])
            items = [
                copy.deepcopy(obj)
                for key, obj in sorted(self.objects.items())
                if key.rsplit("/", 1)[0] == path
            ]
            if items or _is_collection(path):
                return {"items": items, "metadata": {"resourceVersion": str(self._version)}}
            raise ApiError(404, "NotFound", f"{path} not found")

    def list_all(self, path: str, **kw: Any) -> list[dict[str, Any]]:
        return self.get(path, **kw)["items"]

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> dict[str, Any]:
        with self._lock:
            self.calls.append((method, path, ()))
            if method == "POST":
                name = body["metadata"]["name"]
                item = f"{path}/{name}"
                if item in self.objects:
                    raise ApiError(409, "AlreadyExists", f"{name} already exists")
                stored = copy.deepcopy(body)
                stored["metadata"]["resourceVersion"] = self._next_version()
                self.objects[item] = stored
                return copy.deepcopy(stored)
            if method == "PUT":
                current = self.objects.get(path)
                if current is None:
                    raise ApiError(404, "NotFound", f"{path} not found")
                asked = body["metadata"].get("resourceVersion")
                if asked != current["metadata"]["resourceVersion"]:
                    raise ApiError(409, "Conflict", "the object has been modified")
                stored = copy.deepcopy(body)
                stored["metadata"]["resourceVersion"] = self._next_version()
                self.objects[path] = stored
                return copy.deepcopy(stored)
            if method == "DELETE":
                if self.objects.pop(path, None) is None:
                    raise ApiError(404, "NotFound", f"{path} not found")
                return {}
            raise ApiError(405, "MethodNotAllowed", method)

    def reads_of(self, path: str) -> list[tuple[tuple[str, str], ...]]:
        """The query of every GET of `path`."""
        return [query for method, p, query in self.calls if method == "GET" and p == path]


def _is_collection(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in ("configmaps", "podgroups", "resourcequotas", "pods")
