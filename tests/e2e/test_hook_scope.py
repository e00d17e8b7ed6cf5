"""The pod quota hook is called only in namespaces with reservations (issue 12), without losing
the guarantee that a namespace's first reservation holds from its first pod on. On the real
control plane, as a tenant with the built-in `edit` role (tests/e2e/tenant.py):

- the first PodGroup in a fresh namespace enrols it (priogate.scope) and is admitted in one
  request, and a burst of plain pods created right after it cannot eat the reservation: every
  one of them went through the pod quota hook;
- pod creates in a namespace without reservations never reach the pod quota hook, and neither
  does a PodGroup that reserves nothing enrol it;
- the tenant cannot remove the enrolment label, nor turn the coverage probe into a way around
  the quota;
- a label an admin removes from a namespace that holds reservations (or one that reserved
  before enrolment existed) is put back by the controller (controller/enrol.py).

Counted with the webhook's own priogate_webhook_requests_total (webhook/metrics.py) and
kube-apiserver's apiserver_admission_webhook_request_total.
"""

from __future__ import annotations

import threading
import time

import requests

from localcluster import LocalCluster
from localcluster.api import metric_sum
from localcluster.webhooks import WEBHOOK_METRIC
from priogate.kube.client import ApiClient
from priogate.scope import COVERED, ENROLLED_LABEL, PROBE_NAME, enrolled
from tests.builders import pod, podgroup_body
from tests.e2e.helpers import refusal, wait_for
from tests.e2e.tenant import Tenant
from tests.e2e.test_hostile_tenant_quota import quota

POD_QUOTA = "pod-quota.priogate.io"
PODGROUP_QUOTA = "podgroup-quota.priogate.io"
ENROLMENT = "podgroup-enrolment.priogate.io"
MERGE = "application/merge-patch+json"


def answered(cluster: LocalCluster, hook: str) -> float:
    """Requests the webhook answered for `hook`, all workers and decisions."""
    session = requests.Session()
    session.trust_env = False
    cert = cluster.webhook_client_cert
    session.cert = (str(cert[0]), str(cert[1])) if cert else None
    text = session.get(f"{cluster.ports.webhook_url}/metrics", verify=str(cluster.pki.ca_crt), timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("priogate_webhook_requests_total{") and f'webhook="{hook}"' in line
    )


def called(admin: ApiClient, hook: str) -> float:
    """Calls kube-apiserver made to `hook` (any answer)."""
    return metric_sum(admin.get_text("/metrics"), WEBHOOK_METRIC, {"name": hook})


def admitted_by(admin: ApiClient, hook: str) -> float:
    """Calls `hook` answered with an admission (200). The enrolment's dry-run coverage probes go
    through the enrolment hook too while kube-apiserver does not route the namespace yet, and are
    refused there (priogate.scope): how many depends on the informer's lag."""
    return metric_sum(admin.get_text("/metrics"), WEBHOOK_METRIC, {"name": hook, "code": "200"})


def labels(admin: ApiClient, namespace: str) -> dict[str, str]:
    return admin.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("labels") or {}


def burst(tenant: Tenant, n: int) -> list[tuple[int, str] | None]:
    core = tenant.core
    body = pod(None, namespace=None, generate_name="burst-", cpu="1", limits={"cpu": "1"})
    outcomes: list[tuple[int, str] | None] = []
    lock = threading.Lock()
    start = threading.Barrier(n)

    def create() -> None:
        start.wait()
        got = refusal(lambda: core.create_namespaced_pod(tenant.namespace, body))
        with lock:
            outcomes.append(got)

    threads = [threading.Thread(target=create) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outcomes) == n
    return outcomes


def test_the_first_reservation_is_enforced_from_the_first_pod_on(
    cluster: LocalCluster, tenant: Tenant, admin: ApiClient
):
    assert not enrolled(labels(admin, tenant.namespace))
    quota(admin, tenant.namespace, "10")
    enrolments, pod_checks = admitted_by(admin, ENROLMENT), answered(cluster, POD_QUOTA)

    # One request, no retry: the enrolment hook labels the namespace and proves kube-apiserver
    # routes it before it admits the claim.
    tenant.create_podgroup(podgroup_body("gang", {"cpu": "6"}))
    outcomes = burst(tenant, 16)  # at once

    assert enrolled(labels(admin, tenant.namespace))
    assert admitted_by(admin, ENROLMENT) == enrolments + 1
    existing = tenant.core.list_namespaced_pod(tenant.namespace).items
    admitted = [o for o in outcomes if o is None]
    refusals = [o for o in outcomes if o is not None]
    assert len(existing) <= 4, f"{len(existing)} pods exist beside a 6-of-10 first reservation"
    assert len(admitted) == len(existing)
    assert all("reserved by PodGroups" in m or "exceeded quota" in m for _, m in refusals), refusals
    # Every pod of the burst was sent to the pod quota hook (kube-apiserver calls the
    # validating webhooks before its ResourceQuota plugin, so refused ones too).
    wait_for(
        lambda: answered(cluster, POD_QUOTA) >= pod_checks + 16,
        10,
        "the pod quota hook has answered all 16 pods of the burst",
        0.2,
    )
    # Later claims in the enrolled namespace go to the reservation hook, not the enrolment one.
    before = called(admin, ENROLMENT)
    got = refusal(lambda: tenant.create_podgroup(podgroup_body("five", {"cpu": "5"})))
    assert got is not None and "reserved: cpu=6, limited: cpu=10" in got[1], got
    assert called(admin, ENROLMENT) == before


def test_a_namespace_without_reservations_is_never_sent_to_the_pod_quota_hook(
    cluster: LocalCluster, tenant: Tenant, admin: ApiClient
):
    quota(admin, tenant.namespace, "10")
    # A PodGroup that claims nothing (no pod, no resource) reaches neither PodGroup quota hook,
    # and enrols nothing. (One that claims its minMember as pods is judged: a quota on pods, or
    # one scoped to its class, binds it: tests/e2e/test_podgroup_claims.py.)
    enrolments, reservations = called(admin, ENROLMENT), called(admin, PODGROUP_QUOTA)
    tenant.create_podgroup({**podgroup_body("plain", {"cpu": "1"}), "spec": {"minMember": 0}})
    assert (called(admin, ENROLMENT), called(admin, PODGROUP_QUOTA)) == (enrolments, reservations)
    assert not enrolled(labels(admin, tenant.namespace))

    before_webhook, before_apiserver = answered(cluster, POD_QUOTA), called(admin, POD_QUOTA)
    outcomes = burst(tenant, 6)
    assert outcomes == [None] * 6
    time.sleep(1)  # a counter that would move has moved by now
    assert answered(cluster, POD_QUOTA) == before_webhook
    assert called(admin, POD_QUOTA) == before_apiserver


def test_the_tenant_can_neither_remove_the_label_nor_abuse_the_probe(tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "10")
    tenant.create_podgroup(podgroup_body("gang", {"cpu": "6"}))
    assert enrolled(labels(admin, tenant.namespace))
    ns = tenant.namespace
    for verb in (
        ("label", "namespace", ns, f"{ENROLLED_LABEL}-"),
        ("label", "namespace", ns, f"{ENROLLED_LABEL}=false", "--overwrite"),
        (
            "patch",
            "namespace",
            ns,
            "--type=merge",
            "-p",
            f'{{"metadata":{{"labels":{{"{ENROLLED_LABEL}":null}}}}}}',
        ),
        ("delete", "namespace", ns, "--wait=false"),
    ):
        out = tenant.kubectl(*verb, check=False)
        assert out.returncode != 0 and "forbidden" in out.stderr.lower(), (verb, out.stdout, out.stderr)
    assert enrolled(labels(admin, tenant.namespace))

    # A dry-run probe of the tenant's own is refused, as every probe is; a real PodGroup of the
    # probe's name is an ordinary one, held to the quota like any other.
    probe = podgroup_body(PROBE_NAME, {"cpu": "5"})
    got = refusal(lambda: tenant.create_podgroup(probe, dry_run="All"))
    assert got is not None and got[0] == 403 and COVERED in got[1], got
    got = refusal(lambda: tenant.create_podgroup(probe))
    assert got is not None and "reserved: cpu=6, limited: cpu=10" in got[1], got
    tenant.create_podgroup(podgroup_body(PROBE_NAME, {"cpu": "4"}))
    assert tenant.get_podgroup(PROBE_NAME)["spec"]["minResources"] == {"cpu": "4"}


def test_a_burst_of_first_claims_fills_the_quota_exactly(tenant: Tenant, admin: ApiClient):
    # 24 first claims at once in a fresh namespace: each may be the one that enrols it, and the
    # probes are answered by the very quota server whose threads the claims hold. A claim told
    # "retry" (429) tries again, as a controller would; none may time out, none over-admit.
    quota(admin, tenant.namespace, "10")
    outcomes: dict[str, tuple[int, str] | None] = {}
    retried: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(24)

    def claim(name: str) -> None:
        start.wait()
        for _ in range(50):
            got = refusal(lambda: tenant.create_podgroup(podgroup_body(name, {"cpu": "1"})))
            if got is None or got[0] != 429:
                break
            with lock:
                retried.append(name)
            time.sleep(0.2)
        with lock:
            outcomes[name] = got

    threads = [threading.Thread(target=claim, args=(f"g{i}",)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(outcomes) == 24
    admitted = [n for n, o in outcomes.items() if o is None]
    refusals = [o for o in outcomes.values() if o is not None]
    assert len(admitted) == 10, (admitted, refusals)
    assert all(o[0] == 403 and "exceeded quota" in o[1] for o in refusals), refusals
    assert enrolled(labels(admin, tenant.namespace))
    print(f"first-claim burst: {len(retried)} retries (429) among 24 claims")


def test_the_controller_puts_back_a_removed_label(cluster: LocalCluster, tenant: Tenant, admin: ApiClient):
    quota(admin, tenant.namespace, "10")
    tenant.create_podgroup(podgroup_body("gang", {"cpu": "6"}))
    path = f"/api/v1/namespaces/{tenant.namespace}"
    # As a cluster admin might by hand, or as a namespace that reserved before the label existed.
    admin.request("PATCH", path, body={"metadata": {"labels": {ENROLLED_LABEL: None}}}, content_type=MERGE)
    # The Namespace event enqueues its ledger's key at once (the periodic sweep would too).
    wait_for(lambda: enrolled(labels(admin, tenant.namespace)), 30, "the controller labels it again", 0.2)
    # And kube-apiserver routes its pods to the pod quota hook again.
    body = pod(None, namespace=None, generate_name="big-", cpu="5", limits={"cpu": "5"})

    def refused() -> bool:
        got = refusal(lambda: tenant.core.create_namespaced_pod(tenant.namespace, body, dry_run="All"))
        return got is not None and "reserved by PodGroups" in got[1]

    wait_for(refused, 10, "a 5-cpu pod is refused beside the 6-of-10 reservation", 0.2)
