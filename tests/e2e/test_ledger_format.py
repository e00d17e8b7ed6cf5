"""The ledger's form through the real control plane, with a tenant (built-in `edit`
in one namespace) creating the PodGroups: the ledger kube-apiserver stores holds their entries in
compressed shards (base64 text in data) and the quota holds exactly; and a ledger in another form
(one JSON text, or shards in binaryData, as a hand edit may leave it) is not guessed at: it is
read as damaged, rebuilt from the stored PodGroups and written back in its form, the quota
holding throughout."""

from __future__ import annotations

import json

import pytest

from localcluster import LocalCluster
from priogate.kube.client import ApiClient, ApiError
from priogate.ledger.codec import (
    CHARGES_DATA_KEY,
    DEFAULT_LEDGER_NAMESPACE,
    LEDGER_DATA_KEY,
    SHARD_KEY_PREFIX,
    SHARDED_MARKER,
    SHARDS,
    entries_of,
    ledger_path,
    stored_size,
)
from tests.builders import podgroup_body
from tests.e2e.controller_helpers import metric
from tests.e2e.helpers import refusal, wait_for
from tests.e2e.tenant import Tenant
from tests.e2e.test_hostile_tenant_quota import quota

DAMAGED = "ledger damaged"
LEDGER_BYTES = "priogate_ledger_bytes"


def ledger(admin: ApiClient, namespace: str) -> dict:
    return admin.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))


def ledger_groups(admin: ApiClient, namespace: str) -> set[str]:
    return {e.group for e in entries_of(ledger(admin, namespace)).values()}


def test_a_tenants_groups_are_recorded_in_shards_and_the_quota_holds(
    cluster: LocalCluster, tenant: Tenant, admin: ApiClient
):
    quota(admin, tenant.namespace, "10")
    names = [f"g{i:02d}" for i in range(20)]
    for name in names:
        tenant.create_podgroup(podgroup_body(name, {"cpu": "500m"}))
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("one-too-many", {"cpu": "500m"})))
    assert got is not None and got[0] == 403 and "limited: cpu=10" in got[1], got

    stored = ledger(admin, tenant.namespace)
    assert stored["data"][LEDGER_DATA_KEY] == SHARDED_MARKER
    assert "binaryData" not in stored
    assert 1 <= len(shards_of(stored)) <= SHARDS
    assert ledger_groups(admin, tenant.namespace) == set(names)
    # The controller exports how full the ledger is (its alert fires before claims are refused).
    ours = {"tenant_namespace": tenant.namespace}
    wait_for(
        lambda: (
            metric(cluster.ports.controller_url, LEDGER_BYTES, ours)
            == stored_size(ledger(admin, tenant.namespace))
        ),
        10,
        "the controller's gauge shows the ledger's size",
        0.2,
    )


def shards_of(stored: dict) -> dict[str, str]:
    return {
        k: v for k, v in stored["data"].items() if k.startswith(SHARD_KEY_PREFIX) and k != LEDGER_DATA_KEY
    }


def in_another_form(current: dict, form: str) -> dict:
    """The ledger in a form priogate does not write: every entry as one JSON text in data, or the
    same shards as binaryData."""
    charges = {CHARGES_DATA_KEY: current["data"].get(CHARGES_DATA_KEY, "{}")}
    if form == "one JSON text":
        entries = {key: e.to_json() for key, e in entries_of(current).items()}
        current["data"] = {LEDGER_DATA_KEY: json.dumps(entries), **charges}
        current.pop("binaryData", None)
    else:
        shards = shards_of(current)
        current["data"] = {LEDGER_DATA_KEY: SHARDED_MARKER, **charges}
        current["binaryData"] = shards
    return current


@pytest.mark.parametrize("form", ["one JSON text", "shards in binaryData"])
def test_a_ledger_in_another_form_is_rebuilt_and_the_quota_holds(
    cluster: LocalCluster, tenant: Tenant, admin: ApiClient, form: str
):
    quota(admin, tenant.namespace, "3")
    for name in ("a", "b"):
        tenant.create_podgroup(podgroup_body(name, {"cpu": "1"}))
    # The admin rewrites the ledger in a form priogate does not write. Retried on 409 (the
    # controller's sweep may write meanwhile).
    path = ledger_path(DEFAULT_LEDGER_NAMESPACE, tenant.namespace)
    for _ in range(10):
        current = in_another_form(admin.get(path), form)
        try:
            admin.replace(path, current)
            break
        except ApiError as e:
            if e.status != 409:
                raise
    else:
        raise AssertionError("the ledger kept changing")

    def damaged() -> int:
        """Ledgers read as damaged, by the webhook's turns or the controller's sweep."""
        return sum((cluster.logs / f"{c}.log").read_text().count(DAMAGED) for c in ("webhook", "controller"))

    damaged_before = damaged()

    tenant.create_podgroup(podgroup_body("c", {"cpu": "1"}))
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("d", {"cpu": "1"})))
    assert got is not None and got[0] == 403 and "limited: cpu=3" in got[1], got

    stored = ledger(admin, tenant.namespace)
    assert stored["data"][LEDGER_DATA_KEY] == SHARDED_MARKER  # written back in the current form
    assert "binaryData" not in stored
    assert ledger_groups(admin, tenant.namespace) == {"a", "b", "c"}
    # Read as damaged and rebuilt from the stored groups, never read as empty: "d" was refused.
    assert damaged() > damaged_before, "the ledger in another form was not read as damaged"
