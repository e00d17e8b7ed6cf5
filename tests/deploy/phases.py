"""The real-node phases (tests/deploy/test_chart_on_node.py): a relay between the webhook pods,
and after the first `helm uninstall`: what the uninstall leaves behind, an install with mTLS
whose pods become Ready through httpGet /readyz on the health ports, `kubectl apply -k
manifests/` / `kubectl delete -k manifests/`, and an install with the Priority plugin replaced."""

from __future__ import annotations

import base64
import dataclasses
import subprocess
import time
import warnings
from pathlib import Path

import requests
import urllib3

from localcluster import LocalCluster
from localcluster.binaries import REPO
from localcluster.procs import progress
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.ledger.codec import ledger_path
from priogate.ledger.timing import WRITER_FRESH_SECONDS
from priogate.ledger.turn_order import peer_of, turn_of
from tests.deploy.helpers import (
    GROUPS,
    GROUPS_NS,
    HEALTH_PORTS,
    IMAGE,
    NAMESPACE,
    PODS,
    QUOTA_CPU,
    QUOTA_PORT,
    RELEASE,
    admitting,
    group,
    health_readyz,
    helm,
    helm_install,
    pod_requests,
    pods,
    rolled_out,
    unschedulable_pod,
    wait_for,
)
from tests.reviews import group_review

# Namespaced kinds priogate's install or its programs create in their namespace.
NAMESPACED = (
    ("v1", "configmaps"),
    ("v1", "secrets"),
    ("v1", "services"),
    ("v1", "serviceaccounts"),
    ("v1", "pods"),
    ("apps/v1", "deployments"),
    ("batch/v1", "jobs"),
    ("coordination.k8s.io/v1", "leases"),
    ("rbac.authorization.k8s.io/v1", "roles"),
    ("rbac.authorization.k8s.io/v1", "rolebindings"),
    ("networking.k8s.io/v1", "networkpolicies"),
    ("policy/v1", "poddisruptionbudgets"),
)
CLUSTER_SCOPED = (
    ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"),
    ("rbac.authorization.k8s.io/v1", "clusterroles"),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
)
# What stays in the release namespace on purpose after `helm uninstall`: the namespace itself
# (`--create-namespace` made it; Helm never deletes it) and what Kubernetes puts in every one.
EXPECTED_TO_STAY = {("configmaps", "kube-root-ca.crt"), ("serviceaccounts", "default")}


def priogate_objects(api: ApiClient) -> list[str]:
    """Every object named priogate* or labelled app.kubernetes.io/name=priogate in the release
    namespace and cluster-wide (webhook configurations, cluster RBAC), as kind/name."""
    found = []
    for gv, plural in NAMESPACED + CLUSTER_SCOPED:
        namespace = NAMESPACE if (gv, plural) in NAMESPACED else None
        for o in api.get(resource_path(gv, plural, namespace))["items"]:
            meta = o["metadata"]
            labelled = (meta.get("labels") or {}).get("app.kubernetes.io/name") == "priogate"
            if (plural, meta["name"]) in EXPECTED_TO_STAY:
                continue
            if namespace or labelled or meta["name"].startswith("priogate"):
                found.append(f"{plural}/{meta['name']}")
    return found


def nothing_left(api: ApiClient) -> None:
    """After `helm uninstall` (its post-delete cleanup Job done): no webhook configuration, no
    serving Secret, no ledger or Lease, nothing else of priogate's."""
    left: list[str] = []

    def clean() -> bool:
        left[:] = priogate_objects(api)
        return not left

    wait_for(clean, 60, "nothing of priogate is left", interval=1)
    progress("after helm uninstall nothing of priogate is left (the namespace, and the CRD in crds/, stay)")


def install_with_mtls(lc: LocalCluster, api: ApiClient, repository: str, tag: str) -> float:
    """`helm install --wait` with mtls.clientCASecret: the webhook port requires client
    certificates, and --wait returns only once the pods are Ready, which kubelet decides with
    httpGet /readyz on the health ports (no client certificate). The pods relay to each other
    (relay_between_pods). Then uninstall again."""
    ca = (lc.pki.webhook_client_ca_crt if lc.pki else None) or None
    assert ca is not None
    secret = {
        "metadata": {"name": "apiserver-client-ca"},
        "data": {"ca.crt": base64.b64encode(ca.read_bytes()).decode()},
    }
    api.create(resource_path("v1", "secrets", NAMESPACE), secret)
    # After an uninstall, PodGroup creates need a restarted kube-apiserver (kubernetes#133827,
    # kustomize_round).
    progress(f"restarting kube-apiserver (kubernetes#133827): {lc.restart_apiserver(lc.mode):.0f} s")
    ready_s = helm_install(lc, repository, tag, "--set=mtls.clientCASecret=apiserver-client-ca")
    assert rolled_out(api, f"{repository}:{tag}")
    for pod in pods(api, "webhook"):
        for c in pod["spec"]["containers"]:
            assert c["readinessProbe"]["httpGet"] == {
                "path": "/readyz",
                "port": f"{c['name']}-health",
                "scheme": "HTTP",
            }, c["readinessProbe"]
            assert any(a.startswith("--client-ca-file=") for a in c["command"])
    statuses = health_readyz(api)
    assert set(statuses.values()) == {200} and len(statuses) == 2 * len(pods(api, "webhook")), statuses
    ports = sorted(HEALTH_PORTS.values())
    progress(f"mTLS install Ready through httpGet /readyz on ports {ports}: {ready_s:.0f} s")
    assert lc.pki is not None
    wait_for(lambda: admitting(api), 30, "kube-apiserver reaches the webhook Service's endpoints")
    relayed = relay_between_pods(api, (lc.pki.webhook_client_crt, lc.pki.webhook_client_key))
    progress(f"with mTLS, a PodGroup review sent to the pod not holding the turn was relayed ({relayed})")
    helm(lc, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=3m", timeout=200)
    api.delete(resource_path("v1", "secrets", NAMESPACE, "apiserver-client-ca"))
    nothing_left(api)
    return ready_s


def kubectl(lc: LocalCluster, *args: str, timeout: float = 300) -> str:
    r = subprocess.run(
        ["kubectl", f"--kubeconfig={lc.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert r.returncode == 0, f"kubectl {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


def kustomize_image() -> str:
    """The image manifests/ names (kustomization.yaml `images`), as kubelet resolves it."""
    out = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "manifests")], capture_output=True, text=True, check=True
    ).stdout
    images = {line.split("image:", 1)[1].strip() for line in out.splitlines() if "image: " in line}
    (image,) = images
    return image


def kustomize_round(lc: LocalCluster, api: ApiClient) -> float:
    """`kubectl apply -k manifests/` as shipped: both Deployments available, a PodGroup beyond the
    quota refused through those pods; then `kubectl delete -k manifests/`."""
    assert lc.node is not None
    image = kustomize_image()  # priogate:<version>, i.e. docker.io/library/priogate:<version>
    subprocess.run(["podman", "tag", IMAGE, f"docker.io/library/{image}"], check=True)
    progress(f"loading {image}: {lc.node.load_image(f'docker.io/library/{image}'):.0f} s")
    # kube-apiserver 1.36 stops the ConfigMap informer of a MutatingAdmissionPolicy's params for
    # good once no binding names that paramKind (the uninstalls before deleted priogate's), and a
    # binding created later finds no params: every PodGroup create is refused with "no params
    # found" until kube-apiserver restarts (kubernetes/kubernetes#133827, fix #141015, 1.36
    # backport #142150; docs/limits.md). So this install starts on a restarted kube-apiserver.
    progress(f"restarting kube-apiserver (kubernetes#133827): {lc.restart_apiserver(lc.mode):.0f} s")
    t0 = time.monotonic()
    kubectl(lc, "apply", "-k", str(REPO / "manifests"))
    wait_for(lambda: rolled_out(api, image), 300, "the kustomize install is available")
    ready_s = time.monotonic() - t0
    wait_for(lambda: admitting(api), 30, "kube-apiserver reaches the webhook Service's endpoints")
    admitted = []
    for i in range(QUOTA_CPU + 1):
        try:
            api.create(GROUPS, group(f"kustomize-{i}"))
            admitted.append(i)
        except ApiError as e:
            assert i == QUOTA_CPU and "exceeded quota" in e.message, e
    assert admitted == list(range(QUOTA_CPU)), "the groups beyond the quota are refused by manifests/' pods"
    progress(f"kubectl apply -k manifests/: available in {ready_s:.0f} s; the group beyond the quota refused")
    kubectl(lc, "delete", "-k", str(REPO / "manifests"), "--wait=true", "--timeout=300s", timeout=330)
    return ready_s


def replaced_plugin_round(lc: LocalCluster, api: ApiClient, repository: str, tag: str) -> float:
    """The Priority plugin replaced (docs/modes.md): kube-apiserver restarted with Priority
    disabled, `helm install --wait` with priorityPlugin=false. The pod priority hook is Fail for
    every namespace but the release's, and its only endpoints are the pods being installed: they
    start because the release namespace is exempt (no deadlock), and a pod elsewhere then gets
    its priority from priogate. Uninstalled again; nothing left."""
    # The same mode otherwise: its extra flags route webhook calls to the pods' endpoints.
    lc.restart_apiserver(dataclasses.replace(lc.mode, priority_plugin=False))
    ready_s = helm_install(lc, repository, tag, "--set=priorityPlugin=false")
    assert rolled_out(api, f"{repository}:{tag}")
    config = api.get(
        resource_path("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", None, "priogate")
    )
    hook = next(h for h in config["webhooks"] if h["name"] == "pod-priority.priogate.io")
    assert hook["failurePolicy"] == "Fail"
    (exempt,) = hook["namespaceSelector"]["matchExpressions"][:1]
    assert exempt["operator"] == "NotIn" and NAMESPACE in exempt["values"], exempt
    for component in ("webhook", "controller"):
        for pod in pods(api, component):
            assert pod["spec"]["priority"] == 2_000_000_000, "the chart wrote the class's integer"
    wait_for(lambda: admitting(api), 30, "kube-apiserver reaches the webhook Service's endpoints")
    created = api.create(PODS, unschedulable_pod("priority-from-priogate"))
    assert created["spec"].get("priority") == 0, created["spec"]
    progress(
        f"priorityPlugin=false: the webhook pods Ready in {ready_s:.0f} s behind their own Fail pod"
        " hook (release namespace exempt); a pod elsewhere got its priority from priogate"
    )
    api.delete(f"{PODS}/priority-from-priogate")
    helm(lc, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=3m", timeout=200)
    nothing_left(api)
    return ready_s


def relay_between_pods(api: ApiClient, client_cert: tuple[Path, Path] | None = None) -> int:
    """The quota servers relay a namespace's ledger admissions to the pod holding its turn, pod
    to pod over their pod IPs (docs/ledger.md, "One writer per namespace"). Once no pod has
    written lately, one PodGroup created through kube-apiserver makes the pod that decided it
    the only recent writer, so the turn holder; a PodGroup review POSTed straight to the other
    pod's quota port then goes on to that writer, which answers it. `client_cert`: what the
    webhook port requires (mtls.clientCASecret); the pods then relay presenting their serving
    certificate. Returns the other pod's count of relayed reviews."""
    api.request("DELETE", GROUPS)
    wait_for(lambda: not api.get(GROUPS)["items"], 60, "no PodGroup is left")
    time.sleep(WRITER_FRESH_SECONDS + 1)  # neither pod holds the turn now
    api.create(GROUPS, group("relay-probe"))
    writer = peer_of(turn_of(api.get(ledger_path(NAMESPACE, GROUPS_NS))).writer)
    assert writer is not None, "the ledger's turn stamp names no peer address"
    ips = [p["status"]["podIP"] for p in pods(api, "webhook")]
    assert writer[0] in ips and len(ips) == 2, (writer, ips)
    (other,) = [ip for ip in ips if ip != writer[0]]
    obj = {**group("relay-dry-run"), "metadata": {"name": "relay-dry-run", "namespace": GROUPS_NS}}
    review = group_review(obj, dry_run=True)
    session = requests.Session()
    session.trust_env = False
    session.cert = (str(client_cert[0]), str(client_cert[1])) if client_cert else None
    # The pod's serving certificate names the Service, not its IP; the test checks the relay,
    # not the certificate (tests/unit/test_ledger_relay.py pins it).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
        answer = session.post(
            f"https://{other}:{QUOTA_PORT}/validate/podgroups?timeout=10s",
            json=review,
            verify=False,
            timeout=15,
        )
    assert answer.status_code == 200, answer.text[:300]
    response = answer.json()["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True, response
    relayed = pod_requests(other, HEALTH_PORTS["quota"]).get(("podgroup-quota.priogate.io", "relayed"), 0)
    assert relayed >= 1, f"the pod at {other} relayed nothing to the writer at {writer[0]}"
    api.delete(f"{GROUPS}/relay-probe")
    return int(relayed)
