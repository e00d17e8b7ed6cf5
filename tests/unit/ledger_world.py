"""The world the ledger-store tests run in: a real LedgerStore against an in-memory API server
(tests/fake_api.py) holding one quota, caches fed by hand, and the helpers that admit and store
PodGroups and age the ledger's entries."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace

import orjson

from priogate import clock
from priogate.kube.client import resource_path
from priogate.kube.ledger_store import LedgerStore
from priogate.ledger.codec import ledger_object, ledger_of, ledger_path
from priogate.ledger.model import stamp
from tests.builders import cpu_podgroup, resource_quota
from tests.fake_api import FakeApi
from tests.reviews import fed_cache, group_review
from webhook.review import parse_review
from webhook.rules import podgroup_quota
from webhook.view import CacheView

NS = "team-a"
GROUPS = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", NS)
QUOTAS = resource_path("v1", "resourcequotas", NS)
LEDGER = ledger_path("priogate-system", NS)


def setup(quota_cpu: str = "10", cached_groups=(), cached_ledgers=(), in_flight: float = 15.0):
    api = FakeApi()
    api.put_object(QUOTAS, resource_quota("compute", hard={"cpu": quota_cpu}, namespace=NS))
    caches = {
        "resourcequotas": fed_cache("resourcequotas", []),  # the cache has not seen the quota yet
        "podgroups": fed_cache("podgroups", cached_groups),
        "pods": fed_cache("pods", []),
        "ledgers": fed_cache("ledgers", cached_ledgers),
    }
    bound = dt.timedelta(seconds=in_flight)
    store = LedgerStore(api, in_flight=bound)  # type: ignore[arg-type]
    return api, CacheView(caches, store, in_flight=bound)


def admit_group(view, name: str, cpu: str, uid: str | None = None, within: float | None = None):
    """`within`: the request's deadline, seconds from now (kube-apiserver's timeoutSeconds)."""
    body = group_review(cpu_podgroup(name, cpu, namespace=NS, uid=uid))
    deadline = None if within is None else time.monotonic() + within
    return podgroup_quota.admit(parse_review(orjson.dumps(body), deadline), view)


def store_group(api: FakeApi, name: str, cpu: str, uid: str | None = None, **meta) -> dict:
    group = cpu_podgroup(name, cpu, namespace=NS, uid=uid)
    group["metadata"].update(meta)
    return api.put_object(GROUPS, group)


def aged(api: FakeApi, seconds: float) -> None:
    """Make every entry of the stored ledger `seconds` older."""
    obj = api.objects[LEDGER]
    ledger = ledger_of(obj)
    older = {}
    for key, e in ledger.entries.items():
        t = clock.parse_time(e.admitted_at) - dt.timedelta(seconds=seconds)
        older[key] = replace(e, admitted_at=stamp(t))
    new = ledger_object(
        "priogate-system", NS, replace(ledger, entries=older), obj["metadata"]["resourceVersion"]
    )
    api.request("PUT", LEDGER, body=new)
