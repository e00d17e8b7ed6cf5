"""The image and the Helm chart on a real node (make test-deploy; docs/image-and-node.md).

A control plane of its own with a real node (containerd + kubelet, localcluster/node.py) and no
priogate outside the cluster: the chart's pods are the only priogate there is.

1. `helm install --wait` with the image `make image` built, loaded into containerd: it returns
   once both Deployments are available, which needs the serving Secret the chart's pre-install
   Job makes (a post-install hook would wait for `--wait`, and `--wait` for it).
2. The admissions go through those pods: their own /metrics count this test's pod creates, and a
   PodGroup beyond its namespace's quota is refused.
3. Four clients create pods and PodGroups without pause while the release is upgraded to another
   image tag, one webhook pod is deleted, and the controller's leader pod is killed; each phase's
   admissions and failures are counted, and at no sample do the live PodGroups claim more than
   the quota (over-admission). The leader is killed: SIGKILL to its container, then its pod deleted
   with no grace, so it cannot hand its Lease back. Then a PodGroup review sent straight to the
   webhook pod that does not hold the namespace's ledger turn is relayed to the one that does.
4. `helm uninstall`, then pods are created again (no webhook configuration is left behind), and
   nothing of priogate is left in the release namespace or cluster-wide (the chart's post-delete
   Job removed the serving Secret, the ledgers and the Lease).
5. An install with mtls.clientCASecret: the pods become Ready through httpGet /readyz on the
   plain-HTTP health ports, and relay to each other as in 3; uninstalled again.
6. `kubectl apply -k manifests/`: both Deployments available, a PodGroup beyond the quota refused
   through those pods; `kubectl delete -k manifests/`, then pods are created again.
7. kube-apiserver restarted with the Priority plugin disabled, `helm install --wait` with
   priorityPlugin=false: the webhook pods start although the pod priority hook is Fail and they
   are its only endpoints (the release namespace is exempt), and a pod elsewhere gets its
   priority from priogate; uninstalled, nothing left.

The webhook pods' /metrics are read over their health ports (plain HTTP), as Prometheus does.

The summary line (`deploy: install ready in ...`) goes to .local/deploy-summary.txt as well, which
make test-deploy prints last.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
import urllib3

from localcluster import LocalCluster, Options
from localcluster.node import NODE_NAME
from localcluster.procs import progress
from priogate.kube.client import ApiError, load_client, resource_path
from tests.deploy.helpers import (
    CHART,
    ENROLLED,
    GROUPS,
    GROUPS_NS,
    IMAGE,
    NAMESPACE,
    PODS,
    PODS_NS,
    QUOTA_CPU,
    RELEASE,
    SUMMARY,
    UPGRADE_TAG,
    Load,
    Tally,
    group,
    helm,
    helm_install,
    lease_holder,
    pods,
    requests_total,
    rolled_out,
    unschedulable_pod,
    wait_for,
)
from tests.deploy.phases import (
    install_with_mtls,
    kustomize_round,
    nothing_left,
    relay_between_pods,
    replaced_plugin_round,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if os.geteuid() != 0:
        pytest.fail("make test-deploy runs a real node (containerd, kubelet, a bridge): it needs root")
    options = Options(
        state_dir=tmp_path_factory.mktemp("deploy"),
        nodes=0,  # only the real node, so every pod of the chart lands there
        webhook=False,
        controller=False,
        real_node=True,
        priority_plugin=True,  # the chart's default (priorityPlugin: true)
    )
    lc = LocalCluster(options)
    lc.start()
    try:
        yield lc
    finally:
        lc.stop()


def test_chart_on_a_real_node(cluster: LocalCluster) -> None:
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    lc = cluster
    assert lc.node is not None
    api = load_client(str(lc.kubeconfig))
    repository, tag = IMAGE.rsplit(":", 1)
    upgraded = f"{repository}:{UPGRADE_TAG}"
    subprocess.run(["podman", "tag", IMAGE, upgraded], check=True)
    for image in (IMAGE, upgraded):
        progress(f"loading {image} into the node's containerd: {lc.node.load_image(image):.0f} s")

    # 1. install with --wait, as Flux, Argo CD and `--atomic` do: it returns once the chart's
    # Deployments are ready, which needs the Secret its pre-install Job makes.
    for ns in (PODS_NS, GROUPS_NS):
        api.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": ENROLLED}})
    api.create(
        resource_path("v1", "resourcequotas", GROUPS_NS),
        {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": str(QUOTA_CPU)}}},
    )
    # A deleted PodGroup's reservation is swept sooner than the default 30 s, so the four clients'
    # groups are admitted again within a phase.
    install_s = helm_install(lc, repository, tag, "--set=controller.flags.reclaim-seconds=2")
    assert rolled_out(api, IMAGE), "helm install --wait returned before both Deployments were available"
    nodes = {p["spec"].get("nodeName") for c in ("webhook", "controller") for p in pods(api, c)}
    assert nodes == {NODE_NAME}, nodes
    progress(f"installed and ready in {install_s:.0f} s")
    # `kubectl logs` works on this node: kube-apiserver reaches kubelet at the node's IP.
    webhook_pod = pods(api, "webhook")[0]["metadata"]["name"]
    log_text = api.get_text(
        f"{resource_path('v1', 'pods', NAMESPACE, webhook_pod)}/log", query=[("container", "priority")]
    )
    assert "cache listed" in log_text, f"the priority container's log through the API:\n{log_text}"

    # 2. the admissions go through those pods
    before = requests_total(api)
    for i in range(10):
        api.create(PODS, unschedulable_pod(f"counted-{i}"))
    after = requests_total(api)
    counted = sum(v for (hook, _), v in after.items() if "pod" in hook and "podgroup" not in hook) - sum(
        v for (hook, _), v in before.items() if "pod" in hook and "podgroup" not in hook
    )
    assert counted >= 10, f"the webhook pods' /metrics counted {counted} pod admissions of 10: {after}"
    admitted_groups = []
    for i in range(QUOTA_CPU + 1):
        try:
            api.create(GROUPS, group(f"fill-{i}"))
            admitted_groups.append(i)
        except ApiError as e:
            assert i == QUOTA_CPU and "exceeded quota" in e.message, e
    assert admitted_groups == list(range(QUOTA_CPU)), (
        "the first groups fit, the one beyond the quota is refused"
    )
    for i in range(QUOTA_CPU):
        api.delete(f"{GROUPS}/fill-{i}")
    for i in range(10):
        api.delete(f"{PODS}/counted-{i}")

    # 3. phases under load
    load = Load(lc)
    load.start()
    phases: dict[str, Tally] = {}
    try:
        time.sleep(3)
        phases["upgrade"] = tally = Tally()
        load.measure(tally)
        helm(
            lc,
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--reuse-values",
            f"--set=image.tag={UPGRADE_TAG}",
        )
        wait_for(lambda: rolled_out(api, upgraded), 300, "the upgrade has rolled out")

        phases["webhook pod lost"] = tally = Tally()
        load.measure(tally)
        victim = pods(api, "webhook")[0]["metadata"]["name"]
        api.delete(resource_path("v1", "pods", NAMESPACE, victim))
        wait_for(
            lambda: (
                victim not in {p["metadata"]["name"] for p in pods(api, "webhook")}
                and rolled_out(api, upgraded)
            ),
            180,
            "the deleted webhook pod is replaced",
        )
        time.sleep(5)

        phases["leader lost"] = tally = Tally()
        load.measure(tally)
        holder = lease_holder(api)
        assert holder, "the controller holds its Lease"
        leader = next(p for p in pods(api, "controller") if p["metadata"]["name"] in holder)
        name = leader["metadata"]["name"]
        # Killed, not stopped: SIGKILL to its container (so it cannot hand the Lease back), then
        # the pod deleted at once; the standby takes over when the Lease expires.
        for status in leader["status"]["containerStatuses"]:
            lc.node.ctr("tasks", "kill", "--signal=SIGKILL", status["containerID"].split("://", 1)[1])
        api.request(
            "DELETE",
            resource_path("v1", "pods", NAMESPACE, name),
            body={"gracePeriodSeconds": 0},
        )
        wait_for(
            lambda: (h := lease_holder(api)) is not None and name not in h and rolled_out(api, upgraded),
            120,
            "another controller pod leads",
        )
        time.sleep(5)
        load.measure(None)
    finally:
        load.close()
    for phase, t in phases.items():
        progress(
            f"{phase} ({t.seconds:.0f} s): {t.admitted} admitted ({t.pods} pods, {t.admitted - t.pods}"
            f" PodGroups), {t.refused} PodGroups refused (quota full), {t.failed} failed"
        )
        for error, n in t.errors.most_common(5):
            progress(f"    {n} x {error}")
    progress(f"live PodGroups at most {load.max_live} (quota {QUOTA_CPU})")
    relayed = relay_between_pods(api)
    progress(
        f"a PodGroup review sent to the pod not holding the ledger's turn was relayed ({relayed} so far)"
    )

    # 4. uninstall; pods can still be created, and nothing of priogate is left: the post-delete
    # Job removed the serving Secret, the ledgers and the Lease.
    helm(lc, "uninstall", RELEASE, "-n", NAMESPACE)
    wait_for(
        lambda: not pods(api, "webhook") and not pods(api, "controller"), 120, "the release's pods are gone"
    )
    for i in range(3):
        api.create(PODS, unschedulable_pod(f"after-{i}"))
    left = {p["metadata"]["name"] for p in api.get(PODS)["items"]}
    assert {f"after-{i}" for i in range(3)} <= left
    nothing_left(api)

    # 5. with mTLS on the webhook port the pods still become Ready through httpGet /readyz
    install_with_mtls(lc, api, repository, tag)

    # 6. `kubectl apply -k manifests/`, then `kubectl delete -k manifests/`; pods still create
    api.request("DELETE", GROUPS)  # what the clients may have left; the quota starts empty
    wait_for(lambda: not api.get(GROUPS)["items"], 60, "no PodGroup is left")
    kustomize_s = kustomize_round(lc, api)
    for i in range(3):
        api.create(PODS, unschedulable_pod(f"after-kustomize-{i}"))

    # 7. the Priority plugin replaced: the webhook pods start behind their own Fail pod hook
    replaced_plugin_round(lc, api, repository, tag)

    summary = (
        f"deploy: install ready in {install_s:.0f} s; "
        + "; ".join(f"{phase}: {t.line()}" for phase, t in phases.items())
        + f"; over-admitted {load.over_admitted}; uninstall: pods create"
        + f"; kustomize: ready in {kustomize_s:.0f} s"
    )
    print("\n" + summary, flush=True)
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(summary + "\n")
    for phase, t in phases.items():
        assert t.admitted > 0, f"{phase}: nothing was admitted"
    assert load.over_admitted == 0, f"{load.over_admitted} PodGroups beyond the quota were live at once"
