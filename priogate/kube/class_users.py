"""Listing who names a PriorityClass, cluster-wide, within an admission's deadline
(priogate/class_users.py decides what counts; docs/priorityclass-deletes.md).

Only a PriorityClass DELETE (and a new globalDefault, for the namespaces) pays for this, so no
cache of every workload is kept: each kind is LISTed when asked, paginated, and each page is
reduced to the objects that name the class before the next is read, so memory stays one page per
kind whatever the cluster's size. A LIST without resourceVersion is a consistent read of the
latest state (Kubernetes API concepts, "Resource versions"; served from the watch cache where
ConsistentListFromCache, KEP-2340, is on), so an object stored before the delete arrived is seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from priogate.class_users import KINDS, Kind, Use, collapse, terminating_namespaces, uses_of
from priogate.kube.client import ApiClient, ApiError, resource_path

PAGE_SIZE = 500
CONNECT_SECONDS = 3.0
GRACE_SECONDS = 0.1


class ListingFailed(Exception):
    """Some kind could not be listed completely by the deadline: the answer would be a guess."""


class NotServed(Exception):
    """The API server does not serve the kind (its CRD or API version is not installed)."""


def pages(
    client: ApiClient, path: str, *, deadline: float, clock: Callable[[], float] = time.monotonic
) -> Iterator[list[Any]]:
    """Each page of a paginated LIST of `path`. Raises NotServed for a 404 on the first page,
    ListingFailed for anything else that stops the listing, the deadline (time.monotonic())
    included."""
    token = ""
    while True:
        left = deadline - clock()
        if left <= 0:
            raise ListingFailed(f"{path}: not listed within the admission's time")
        query = [("limit", str(PAGE_SIZE))] + ([("continue", token)] if token else [])
        try:
            page = client.get(path, query=query, timeout=(min(CONNECT_SECONDS, left), left))
        except ApiError as e:
            if e.status == 404 and not token:
                raise NotServed(path) from None
            raise ListingFailed(f"{path}: {e}") from None
        except Exception as e:  # urllib3's timeouts and connection errors, a body that is not JSON
            raise ListingFailed(f"{path}: {type(e).__name__}: {e}") from None
        if not isinstance(page, dict):
            raise ListingFailed(f"{path}: the answer is not a list")
        items = page.get("items")
        yield items if isinstance(items, list) else []
        meta = page.get("metadata")
        token = meta.get("continue", "") if isinstance(meta, dict) else ""
        if not isinstance(token, str) or not token:
            return


def _uses_of_kind(client: ApiClient, kind: Kind, class_name: str, deadline: float) -> list[Use]:
    path = resource_path(kind.group_version, kind.plural)
    found: list[Use] = []
    try:
        for items in pages(client, path, deadline=deadline):
            found += uses_of(kind, items, class_name)
    except NotServed:
        return []  # e.g. Volcano's CRD not installed, native PodGroups not enabled: none exist
    return found


def class_uses(
    client: ApiClient, class_name: str, *, deadline: float, kinds: Sequence[Kind] = KINDS
) -> list[Use]:
    """Every live object of `kinds` naming `class_name`, less those in a namespace being deleted
    and those whose controller is listed (priogate.class_users.collapse). The kinds and the
    namespaces are listed side by side, so the deadline covers the slowest, not their sum.
    Raises ListingFailed naming every listing that failed."""
    pool = ThreadPoolExecutor(max_workers=len(kinds) + 1, thread_name_prefix="class-uses")
    namespaces = pool.submit(list_namespaces, client, deadline=deadline)
    futures = [
        (
            f"{kind.plural}.{kind.group_version}",
            pool.submit(_uses_of_kind, client, kind, class_name, deadline),
        )
        for kind in kinds
    ]
    found: list[Use] = []
    failures: list[str] = []
    terminating: frozenset[str] = frozenset()
    try:
        for what, future in [("namespaces", namespaces), *futures]:
            try:
                # A read can outlast the deadline by its own timeout: stop waiting at the deadline.
                result = future.result(timeout=max(0.0, deadline - time.monotonic()) + GRACE_SECONDS)
            except ListingFailed as e:
                failures.append(str(e))
                continue
            except TimeoutError:
                failures.append(f"{what}: not listed within the admission's time")
                continue
            if future is namespaces:
                terminating = terminating_namespaces(result)
            else:
                found += result
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    if failures:
        raise ListingFailed("; ".join(failures))
    return collapse(found, terminating)


def list_namespaces(
    client: ApiClient, *, deadline: float, clock: Callable[[], float] = time.monotonic
) -> list[Any]:
    """Every namespace (a paginated LIST). Raises ListingFailed."""
    path = resource_path("v1", "namespaces")
    found: list[Any] = []
    try:
        for items in pages(client, path, deadline=deadline, clock=clock):
            found += items
    except NotServed:
        raise ListingFailed(f"{path}: not found") from None
    return found
