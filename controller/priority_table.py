"""Keep the PriorityClass table (priogate/priority_table.py) equal to the controller's
PriorityClass cache, so kube-apiserver's in-process policy resolves the common pod with the
classes as they are.

Called from the work queue (a PriorityClass event, leadership, every resync), only while the
caches are current: a table written from a cache that has not listed yet would call real classes
missing. Each call reads the table (a GET: the table is written by this leader only, but an admin
may edit or delete it) and writes only what differs, under the resourceVersion it read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.priority_table import (
    CLASS_ACCESS_NAME,
    TABLE_NAME,
    class_access_data,
    class_access_object,
    table_data,
    table_object,
)

ATTEMPTS = 5


class TableConflict(RuntimeError):
    """The table kept changing under the writes; the work queue retries later."""


class PriorityTableWriter:
    def __init__(self, client: ApiClient, namespace: str, classes: Callable[[], Iterable[Mapping]]) -> None:
        self.client = client
        self.namespace = namespace
        self.classes = classes
        self.collection = resource_path("v1", "configmaps", namespace)
        self.path = resource_path("v1", "configmaps", namespace, TABLE_NAME)

    def sync(self) -> str:
        """Make the table equal to the cache: returns "written", "created" or "unchanged"; raises
        TableConflict after ATTEMPTS 409s in a row (the work queue retries it with backoff)."""
        for _ in range(ATTEMPTS):
            desired = table_data(self.classes())
            try:
                current = self.client.get(self.path)
            except ApiError as e:
                if e.status != 404:
                    raise
                try:
                    self.client.create(self.collection, table_object(self.namespace, desired))
                    return "created"
                except ApiError as e2:
                    if e2.status != 409:  # created meanwhile: read it and compare
                        raise
                    continue
            if (current.get("data") or {}) == desired:
                return "unchanged"
            try:
                self.client.replace(self.path, {**current, "data": desired})
                return "written"
            except ApiError as e:
                if e.status not in (404, 409):  # deleted or changed meanwhile: start over
                    raise
        raise TableConflict(f"{self.path} kept changing over {ATTEMPTS} writes")


class ClassAccessWriter:
    """Keep CLASS_ACCESS_NAME (priogate/priority_table.py) equal to the annotated classes of the
    cache, and absent while none is annotated: kube-apiserver then skips the class access policy
    without evaluating it (its parameterNotFoundAction is Allow), so pods pay nothing for a rule
    nobody uses. Same reads and writes as PriorityTableWriter, plus the delete."""

    def __init__(self, client: ApiClient, namespace: str, classes: Callable[[], Iterable[Mapping]]) -> None:
        self.client = client
        self.namespace = namespace
        self.classes = classes
        self.collection = resource_path("v1", "configmaps", namespace)
        self.path = resource_path("v1", "configmaps", namespace, CLASS_ACCESS_NAME)

    def sync(self) -> str:
        """ "written", "created", "deleted" or "unchanged"; TableConflict after ATTEMPTS 409s."""
        for _ in range(ATTEMPTS):
            desired = class_access_data(self.classes())
            try:
                current = self.client.get(self.path)
            except ApiError as e:
                if e.status != 404:
                    raise
                if not desired:
                    return "unchanged"
                try:
                    self.client.create(self.collection, class_access_object(self.namespace, desired))
                    return "created"
                except ApiError as e2:
                    if e2.status != 409:
                        raise
                    continue
            try:
                if not desired:
                    # Under the resourceVersion read: a write meanwhile is looked at again.
                    version = current["metadata"].get("resourceVersion") or ""
                    self.client.delete(self.path, preconditions={"resourceVersion": version})
                    return "deleted"
                if (current.get("data") or {}) == desired:
                    return "unchanged"
                self.client.replace(self.path, {**current, "data": desired})
                return "written"
            except ApiError as e:
                if e.status == 404 and not desired:
                    return "unchanged"
                if e.status not in (404, 409):
                    raise
        raise TableConflict(f"{self.path} kept changing over {ATTEMPTS} writes")
