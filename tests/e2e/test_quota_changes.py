"""Quota changes against PodGroup admissions, on the real control plane: the admin changes a
ResourceQuota and a tenant (the built-in `edit` role in one namespace, tests/e2e/tenant.py)
creates PodGroups at once. priogate decides PodGroups on its cached quotas plus the quota
fences its ResourceQuota hook wrote into the namespace's ledger before kube-apiserver stored
each change (webhook.rules.quota_fence), so no change is missed however far the cache is behind.

- a quota created a moment before a create limits it, in an enrolled namespace and in a
  namespace's very first claim (through the enrolment hook);
- a raised quota counts as soon as priogate's cache shows it, and the ledger holds the admin's
  changes and nothing else;
- the tenant can change neither the quotas nor the ledger that holds the fences;
- a quota change forged straight to the webhook refuses for the in-flight bound at most.

(A quota lowered a moment before a create: tests/e2e/test_hostile_tenant_quota.py.)
"""

from __future__ import annotations

import time
import uuid

import pytest
import requests
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster
from localcluster.api import update
from priogate.kube.client import ApiClient, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, ledger_of, ledger_path
from priogate.ledger.timing import IN_FLIGHT
from tests.builders import podgroup_body
from tests.e2e.helpers import refusal, wait_for
from tests.e2e.tenant import Tenant
from tests.e2e.test_hostile_tenant_quota import quota, reserved_groups

ROUNDS = 8


def quotas(namespace: str) -> str:
    return resource_path("v1", "resourcequotas", namespace)


def fences(admin: ApiClient, namespace: str) -> list:
    return list(ledger_of(admin.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace))).fences.values())


def test_a_quota_created_a_moment_before_a_create_limits_it(tenant: Tenant, admin: ApiClient):
    """Each round the admin creates a small quota and the tenant at once claims more than it
    allows: refused by that quota, though the webhook's cache has usually not heard of it.
    Each round's quota is smaller than the last's and its claim fits the last's: a quota
    deleted a moment ago may still limit from the cache (as in kube-apiserver's own quota
    admission, the safe side), and must not be the one that refuses here."""
    quota(admin, tenant.namespace, "1000")
    tenant.create_podgroup(podgroup_body("base", {"cpu": "1"}))
    for round_ in range(ROUNDS):
        small = 100 - 10 * round_  # with base's 1, a claim of `small` exceeds only this quota
        admin.create(
            quotas(tenant.namespace),
            {"metadata": {"name": f"small-{round_}"}, "spec": {"hard": {"cpu": str(small)}}},
        )
        got = refusal(lambda: tenant.create_podgroup(podgroup_body(f"late-{round_}", {"cpu": str(small)})))  # noqa: B023
        assert got is not None and f"exceeded quota: small-{round_}" in got[1], (round_, got)
        admin.request("DELETE", f"{quotas(tenant.namespace)}/small-{round_}")
    assert reserved_groups(admin, tenant.namespace) == {"base"}


def test_a_namespaces_first_claim_is_limited_by_a_quota_created_a_moment_before(
    tenant: Tenant, admin: ApiClient
):
    """The namespace holds no reservation yet: its first claim goes through the enrolment hook,
    which decides it on the same ledger the quota hook fenced."""
    admin.create(quotas(tenant.namespace), {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": "1"}}})
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("first", {"cpu": "2"})))
    assert got is not None and "exceeded quota: compute" in got[1], got
    tenant.create_podgroup(podgroup_body("fits", {"cpu": "1"}))
    assert reserved_groups(admin, tenant.namespace) == {"fits"}


def test_a_raised_quota_counts_once_cached_and_the_ledger_holds_only_the_admins_changes(
    tenant: Tenant, admin: ApiClient
):
    quota(admin, tenant.namespace, "2")
    tenant.create_podgroup(podgroup_body("a", {"cpu": "2"}))
    path = f"{quotas(tenant.namespace)}/compute"
    update(admin, path, lambda q: q["spec"]["hard"].update(cpu="6"))
    # Refused while the webhook's cache still shows cpu=2; admitted once it shows the raise.
    wait_for(
        lambda: refusal(lambda: tenant.create_podgroup(podgroup_body("b", {"cpu": "4"}))) is None,
        30,
        "the raise counts",
        0.2,
    )
    assert reserved_groups(admin, tenant.namespace) == {"a", "b"}
    # Kept until they expire (another replica's cache may still need them), and nothing else.
    assert {f.spec["hard"]["cpu"] for f in fences(admin, tenant.namespace)} == {"2", "6"}


def test_the_tenant_can_change_neither_quotas_nor_the_ledger_of_fences(tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "2")
    for verb in ("create", "update", "patch", "delete"):
        assert not tenant.can(verb, "resourcequotas"), verb
    with pytest.raises(ApiException) as raised:
        tenant.core.patch_namespaced_resource_quota(
            "compute", tenant.namespace, {"spec": {"hard": {"cpu": "99"}}}
        )
    assert raised.value.status == 403
    # The ledger lives in priogate's namespace, out of the tenant's reach.
    ledger = f"podgroup-ledger.{tenant.namespace}"
    with pytest.raises(ApiException) as raised:
        tenant.core.patch_namespaced_config_map(ledger, DEFAULT_LEDGER_NAMESPACE, {"data": {}})
    assert raised.value.status == 403
    assert [f.quota for f in fences(admin, tenant.namespace)] == ["compute"]


def test_a_dry_run_quota_change_writes_no_fence(tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "2")
    before = admin.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, tenant.namespace))["metadata"]["resourceVersion"]
    path = f"{quotas(tenant.namespace)}/compute"
    stored = admin.get(path)
    stored["spec"]["hard"]["cpu"] = "1"
    admin.request("PUT", path, query=[("dryRun", "All")], body=stored)
    after = admin.get(ledger_path(DEFAULT_LEDGER_NAMESPACE, tenant.namespace))["metadata"]["resourceVersion"]
    assert after == before


def test_a_forged_quota_change_refuses_for_the_in_flight_bound_at_most(
    tenant: Tenant, admin: ApiClient, cluster: LocalCluster
):
    """An AdmissionReview lowering the quota, posted straight to the webhook's URL (with
    kube-apiserver's client certificate where mutual TLS is on, as anyone could post it where
    it is off), is never stored: once the in-flight bound has passed, a quorum GET shows the
    quota unchanged and the forged fence stops counting."""
    quota(admin, tenant.namespace, "10")
    stored = admin.get(f"{quotas(tenant.namespace)}/compute")
    lowered = {**stored, "spec": {"hard": {"cpu": "1"}}}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "ResourceQuota"},
            "resource": {"group": "", "version": "v1", "resource": "resourcequotas"},
            "operation": "UPDATE",
            "namespace": tenant.namespace,
            "name": "compute",
            "object": lowered,
            "oldObject": stored,
            "userInfo": {"username": "forger"},
        },
    }
    session = requests.Session()
    session.trust_env = False
    if cluster.webhook_client_cert is not None:
        session.cert = (str(cluster.webhook_client_cert[0]), str(cluster.webhook_client_cert[1]))
    url = f"{cluster.ports.webhook_url}/validate/resourcequotas"
    forged_at = time.monotonic()
    answer = session.post(url, json=review, verify=str(cluster.pki.ca_crt), timeout=15)
    assert answer.status_code == 200 and answer.json()["response"]["allowed"], answer.text
    assert "1" in {f.spec["hard"]["cpu"] for f in fences(admin, tenant.namespace)}
    wait_for(
        lambda: refusal(lambda: tenant.create_podgroup(podgroup_body("fits", {"cpu": "4"}))) is None,
        30,
        "the fence ends",
        0.5,
    )
    took = time.monotonic() - forged_at
    assert took < IN_FLIGHT.total_seconds() + 5, f"refused for {took:.1f} s"
    assert reserved_groups(admin, tenant.namespace) == {"fits"}
