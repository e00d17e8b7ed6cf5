"""What tests/deploy/test_chart_on_node.py runs against the real node: helm, the release's pods,
the webhook pods' metrics read over their health ports, and the four clients that create pods and
PodGroups while the release is upgraded and loses pods."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
import urllib3

from localcluster import LocalCluster
from localcluster.binaries import REPO, ensure_helm
from localcluster.procs import progress
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from tests.deploy.report import cluster_report

RELEASE = "priogate"
NAMESPACE = "priogate-system"
CHART = REPO / "charts" / "priogate"
IMAGE = os.environ.get("PRIOGATE_IMAGE", "localhost/priogate:0.1.0")
# The upgrade's "changed image tag": the same image under a second tag, so the Deployments roll.
UPGRADE_TAG = IMAGE.rsplit(":", 1)[1] + "-upgrade"
PODS_NS = "load-pods"
GROUPS_NS = "load-groups"
QUOTA_CPU = 4  # the ResourceQuota of GROUPS_NS; every PodGroup claims cpu=1
CLIENTS = 4
GROUPS = resource_path("scheduling.volcano.sh/v1beta1", "podgroups", GROUPS_NS)
PODS = resource_path("v1", "pods", PODS_NS)
SUMMARY = REPO / ".local" / "deploy-summary.txt"  # make test-deploy prints it last
# An install Ready later than this is reported (CI's have taken 14 to 22 s).
SLOW_INSTALL_SECONDS = 60
ENROLLED = {"priogate.io/reservations": "true"}  # the quota hooks' namespaceSelector (docs/modes.md)


def helm(lc: LocalCluster, *args: str, timeout: float = 300) -> str:
    r = subprocess.run(
        [str(ensure_helm()), f"--kubeconfig={lc.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert r.returncode == 0, (
        f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
        + cluster_report(lc, NAMESPACE)
    )
    return r.stdout


def helm_install(lc: LocalCluster, repository: str, tag: str, *values: str) -> float:
    """`helm install --wait` of the chart with the image and `values` (each `--set=...`), as
    Flux, Argo CD and `--atomic` do: it returns once the Deployments are ready. The seconds it
    took."""
    t0 = time.monotonic()
    helm(
        lc,
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--create-namespace",
        f"--set=image.repository={repository}",
        f"--set=image.tag={tag}",
        *values,
        "--wait",
        "--timeout=5m",
        timeout=330,
    )
    took = time.monotonic() - t0
    if took > SLOW_INSTALL_SECONDS:
        # Ready in the end, so nothing fails: what held it up (restarts, the containers' last
        # states and log lines, kubelet's log) is gone once the release is uninstalled.
        progress(
            f"helm install took {took:.0f} s, more than {SLOW_INSTALL_SECONDS} s:\n"
            + cluster_report(lc, NAMESPACE)
        )
    return took


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> float:
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(interval)
    return time.monotonic() - t0


def pods(api: ApiClient, component: str) -> list[dict]:
    selector = f"app.kubernetes.io/name=priogate,app.kubernetes.io/component={component}"
    path = resource_path("v1", "pods", NAMESPACE)
    return api.get(path, query=[("labelSelector", selector)])["items"]


def ready(pod: dict) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conditions.get("Ready") == "True"


def rolled_out(api: ApiClient, image: str) -> bool:
    """Both Deployments have every replica ready with `image` and no other pod left."""
    for component in ("webhook", "controller"):
        deployment = api.get(resource_path("apps/v1", "deployments", NAMESPACE, f"priogate-{component}"))
        want = deployment["spec"]["replicas"]
        current = pods(api, component)
        images = {c["image"] for p in current for c in p["spec"]["containers"]}
        if len(current) != want or not all(ready(p) for p in current) or images != {image}:
            return False
    return True


# The webhook servers' plain-HTTP health ports (--health-bind; manifests/webhook.yaml).
HEALTH_PORTS = {"priority": 8081, "quota": 8082}
QUOTA_PORT = 8444  # the quota server's admission port (manifests/webhook.yaml)


def requests_total(api: ApiClient) -> Counter[tuple[str, str]]:
    """priogate_webhook_requests_total of every webhook pod (both containers), by (webhook,
    decision), read from the pods themselves over their pod IPs, on the health ports: plain
    HTTP, no certificate, as Prometheus scrapes them."""
    total: Counter[tuple[str, str]] = Counter()
    for pod in pods(api, "webhook"):
        for port in HEALTH_PORTS.values():
            total.update(pod_requests(pod["status"]["podIP"], port))
    return total


def pod_requests(ip: str, port: int) -> Counter[tuple[str, str]]:
    """priogate_webhook_requests_total of one server, by (webhook, decision), from its health
    port."""
    total: Counter[tuple[str, str]] = Counter()
    session = requests.Session()
    session.trust_env = False
    r = session.get(f"http://{ip}:{port}/metrics", timeout=5)
    assert r.status_code == 200, f"{ip}:{port}/metrics: {r.status_code} {r.text[:200]}"
    for line in r.text.splitlines():
        if line.startswith("priogate_webhook_requests_total{"):
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1 : line.index("}")].split(","))
            key = (labels["webhook"].strip('"'), labels["decision"].strip('"'))
            total[key] += float(line.rsplit(" ", 1)[1])
    return total


def health_readyz(api: ApiClient) -> dict[str, int]:
    """pod:port -> the status of /readyz on each webhook pod's health ports."""
    session = requests.Session()
    session.trust_env = False
    out = {}
    for pod in pods(api, "webhook"):
        ip = pod["status"]["podIP"]
        for port in HEALTH_PORTS.values():
            r = session.get(f"http://{ip}:{port}/readyz", timeout=5)
            out[f"{pod['metadata']['name']}:{port}"] = r.status_code
    return out


def unschedulable_pod(name: str) -> dict:
    """Stays Pending (no node has the label): the test measures admission, not the node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"priogate.io/deploy-test": "nowhere"},
            "containers": [{"name": "c", "image": IMAGE}],
        },
    }


def admitting(api: ApiClient) -> bool:
    """kube-apiserver reaches the webhook Service: a dry-run PodGroup is answered by priogate
    (admitted, or refused by one of its hooks). A Deployment is available when its pods are
    Ready; the Service's endpoints, and kube-apiserver's view of them, follow a moment later,
    and until then every hook call fails ("no endpoints available", failurePolicy Fail)."""
    try:
        api.create(GROUPS, group("admitting-probe"), dry_run=True)
    except ApiError as e:
        if "failed calling webhook" in e.message:
            return False
        if "denied the request" in e.message:
            return True
        raise
    return True


def group(name: str) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 1, "minResources": {"cpu": "1"}},
    }


@dataclass
class Tally:
    admitted: int = 0
    refused: int = 0  # a decision: the quota is full
    failed: int = 0  # anything else: the webhook unreachable, a timeout, a 5xx
    pods: int = 0  # of `admitted`, pods (the rest are PodGroups)
    errors: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0

    def line(self) -> str:
        return f"{self.admitted} admissions, {self.failed} failed"


class Load:
    """CLIENTS clients, each with two streams: pods (each deleted at once) and PodGroups (each
    deleted a moment after it is admitted), so a PodGroup waiting on the quota does not hold up
    the client's pods. The counts go to the current phase's Tally."""

    def __init__(self, lc: LocalCluster) -> None:
        self.lc = lc
        self.lock = threading.Lock()
        self.phase: Tally | None = None
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(i, kind), daemon=True)
            for i in range(CLIENTS)
            for kind in ("pods", "groups")
        ]
        self.over_admitted = 0
        self.max_live = 0

    def start(self) -> None:
        for t in self.threads:
            t.start()
        self.threads.append(threading.Thread(target=self._watch_quota, daemon=True))
        self.threads[-1].start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def measure(self, tally: Tally | None) -> None:
        with self.lock:
            if self.phase is not None:
                self.phase.seconds = time.monotonic() - self.phase.started
            if tally is not None:
                tally.started = time.monotonic()
            self.phase = tally

    def _count(self, outcome: str, error: str = "", pod: bool = False) -> None:
        with self.lock:
            if self.phase is None:
                return
            if outcome == "admitted":
                self.phase.admitted += 1
                self.phase.pods += pod
            elif outcome == "refused":
                self.phase.refused += 1
            else:
                self.phase.failed += 1
                self.phase.errors[error[:160]] += 1

    def _attempt(self, api: ApiClient, path: str, body: dict) -> bool:
        try:
            api.create(path, body)
        except ApiError as e:
            if e.status == 403 and "exceeded quota" in e.message:
                self._count("refused")
            else:
                self._count("failed", f"{e.status} {e.message}")
            return False
        except (urllib3.exceptions.HTTPError, OSError) as e:
            self._count("failed", repr(e))
            return False
        self._count("admitted", pod=path == PODS)
        return True

    def _run(self, i: int, kind: str) -> None:
        api = load_client(str(self.lc.kubeconfig))
        n = 0
        while not self.stop.is_set():
            n += 1
            name = f"c{i}-{n}-{uuid.uuid4().hex[:4]}"
            if kind == "pods":
                if self._attempt(api, PODS, unschedulable_pod(name)):
                    _quietly(api.delete, f"{PODS}/{name}")
            elif self._attempt(api, GROUPS, group(name)):
                time.sleep(0.2)
                _quietly(api.delete, f"{GROUPS}/{name}")

    def _watch_quota(self) -> None:
        """Samples the live PodGroups: each claims cpu=1, so more than QUOTA_CPU of them alive at
        once is an over-admission."""
        api = load_client(str(self.lc.kubeconfig))
        while not self.stop.is_set():
            try:
                live = [g for g in api.get(GROUPS)["items"] if not g["metadata"].get("deletionTimestamp")]
            except (ApiError, urllib3.exceptions.HTTPError, OSError):
                time.sleep(0.2)
                continue
            self.max_live = max(self.max_live, len(live))
            if len(live) > QUOTA_CPU:
                self.over_admitted = max(self.over_admitted, len(live) - QUOTA_CPU)
            time.sleep(0.1)


def _quietly(call: Callable[[str], object], path: str) -> None:
    try:
        call(path)
    except (ApiError, urllib3.exceptions.HTTPError, OSError) as e:
        progress(f"delete {path}: {e}")


def lease_holder(api: ApiClient) -> str | None:
    leases = api.get(resource_path("coordination.k8s.io/v1", "leases", NAMESPACE))["items"]
    holders = [
        lease["spec"].get("holderIdentity") for lease in leases if "controller" in lease["metadata"]["name"]
    ]
    return holders[0] if holders else None
