"""An in-memory API server for unit tests of what writes to kube-apiserver (the ledger's
store, the preemptors, the reclaimer): the answers those callers rely on, each as
kube-apiserver gives it, and a log of every call.

- GET of an object or a collection; a collection's items are the objects stored under it.
- POST stores the object (409 AlreadyExists for a taken name; generateName is honoured).
- POST gives the object a uid; PUT replaces it, keeping its uid (422 for another), with
  metadata.resourceVersion as a precondition when given (409).
- PATCH merges annotations, and for a status PATCH conditions by type (as a strategic merge
  does); metadata.resourceVersion is a precondition (409) and metadata.uid immutable (422).
- DELETE honours a uid precondition (409) and answers 404 for what is gone.
A path ending in /status addresses its object. Every call is logged with its query (a quorum
read has no resourceVersion parameter), body and content type.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from priogate.kube.client import ApiClient, ApiError


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Any = None
    content_type: str = "application/json"


class FakeApi(ApiClient):
    def __init__(self, objects: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        # No ApiClient.__init__: nothing here talks to a server.
        self.objects: dict[str, dict[str, Any]] = {
            path: copy.deepcopy(dict(obj)) for path, obj in (objects or {}).items()
        }
        self.calls: list[Call] = []
        given = [(o.get("metadata") or {}).get("resourceVersion", "") for o in self.objects.values()]
        self._version = max([int(v) for v in given if str(v).isdigit()], default=0)
        self._names = itertools.count(1)
        self._uids = itertools.count(1)
        self._lock = threading.RLock()

    @property
    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.method != "GET"]

    def reads_of(self, path: str) -> list[tuple[tuple[str, str], ...]]:
        """The query of every GET of `path`."""
        return [c.query for c in self.calls if c.method == "GET" and c.path == path]

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def put_object(self, collection: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store `obj` in `collection` as if created by someone else (no call logged)."""
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
            self.calls.append(Call("GET", path, tuple(query)))
            target = path.removesuffix("/status")
            if target in self.objects:
                return copy.deepcopy(self.objects[target])
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

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: Any = None,
    ) -> dict[str, Any]:
        if method == "GET":
            return self.get(path, query=query)
        with self._lock:
            self.calls.append(Call(method, path, tuple(query), copy.deepcopy(body), content_type))
            if method == "POST":
                return self._create(path, body)
            target = path.removesuffix("/status")
            current = self.objects.get(target)
            if current is None:
                raise ApiError(404, "NotFound", f"{target} not found")
            if method == "DELETE":
                uid = ((body or {}).get("preconditions") or {}).get("uid")
                if uid is not None and uid != current["metadata"].get("uid"):
                    raise ApiError(409, "Conflict", "Precondition failed: UID in precondition")
                del self.objects[target]
                return {"kind": "Status", "status": "Success"}
            meta = (body or {}).get("metadata") or {}
            asked = meta.get("resourceVersion")
            if asked is not None and asked != current["metadata"].get("resourceVersion"):
                raise ApiError(409, "Conflict", "the object has been modified")
            if method == "PATCH":
                self._patch(current, path, body)
            elif method == "PUT":
                uid = current["metadata"].get("uid")
                if meta.get("uid", uid) != uid:
                    raise ApiError(
                        422, "Invalid", f'metadata.uid: Invalid value: "{meta["uid"]}": field is immutable'
                    )
                current.clear()
                current.update(copy.deepcopy(body))
                if uid is not None:  # kept from the stored object, as kube-apiserver does
                    current["metadata"]["uid"] = uid
            else:
                raise ApiError(405, "MethodNotAllowed", method)
            current["metadata"]["resourceVersion"] = self._next_version()
            return copy.deepcopy(current)

    def _create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(body))
        meta = stored.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'object-')}{next(self._names):05d}"
        item = f"{path}/{meta['name']}"
        if item in self.objects:
            raise ApiError(409, "AlreadyExists", f"{meta['name']} already exists")
        meta["resourceVersion"] = self._next_version()
        meta.setdefault("uid", f"00000000-0000-4000-8000-{next(self._uids):012d}")
        self.objects[item] = stored
        return copy.deepcopy(stored)

    @staticmethod
    def _patch(current: dict[str, Any], path: str, body: Mapping[str, Any]) -> None:
        uid = (body.get("metadata") or {}).get("uid")
        if uid is not None and uid != current["metadata"].get("uid"):
            # kube-apiserver's answer (tests/e2e/test_controller_trust.py): uid is immutable
            raise ApiError(422, "Invalid", f'metadata.uid: Invalid value: "{uid}": field is immutable')
        if path.endswith("/status"):
            status = current.setdefault("status", {})
            for key, value in body["status"].items():
                if key == "conditions":
                    replaced = {v["type"] for v in value}
                    kept = [c for c in status.get("conditions", []) if c["type"] not in replaced]
                    status["conditions"] = kept + value
                else:
                    status[key] = value
            return
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        current["metadata"].setdefault("annotations", {}).update(annotations)


def _is_collection(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in ("configmaps", "podgroups", "resourcequotas", "pods")
