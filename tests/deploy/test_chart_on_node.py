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
   with no grace, so it cannot hand its Lease back.
4. `helm uninstall`, then pods are created again (no webhook configuration is left behind).

The summary line (`deploy: install ready in ...`) goes to .local/deploy-summary.txt as well, which
make test-deploy prints last.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import requests
import urllib3

from localcluster import LocalCluster, Options
from localcluster.binaries import REPO, ensure_helm
from localcluster.node import NODE_NAME
from localcluster.procs import progress
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path

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
ENROLLED = {"priogate.io/reservations": "true"}  # the quota hooks' namespaceSelector (docs/modes.md)


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


def helm(lc: LocalCluster, *args: str, timeout: float = 300) -> str:
    r = subprocess.run(
        [str(ensure_helm()), f"--kubeconfig={lc.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert r.returncode == 0, f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r.stdout


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


def requests_total(api: ApiClient) -> Counter[tuple[str, str]]:
    """priogate_webhook_requests_total of every webhook pod (both containers), by (webhook,
    decision), read from the pods themselves over their pod IPs."""
    total: Counter[tuple[str, str]] = Counter()
    session = requests.Session()
    session.trust_env = False
    for pod in pods(api, "webhook"):
        ip = pod["status"]["podIP"]
        for port in (8443, 8444):
            # The serving certificate names the Service, not the pod IP; this reads counters only.
            text = session.get(f"https://{ip}:{port}/metrics", verify=False, timeout=5).text
            for line in text.splitlines():
                if line.startswith("priogate_webhook_requests_total{"):
                    labels = dict(
                        kv.split("=", 1) for kv in line[line.index("{") + 1 : line.index("}")].split(",")
                    )
                    key = (labels["webhook"].strip('"'), labels["decision"].strip('"'))
                    total[key] += float(line.rsplit(" ", 1)[1])
    return total


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
        # A deleted PodGroup's reservation is swept sooner than the default 30 s, so the four
        # clients' groups are admitted again within a phase.
        "--set=controller.flags.reclaim-seconds=2",
        "--wait",
        "--timeout=5m",
        timeout=330,
    )
    assert rolled_out(api, IMAGE), "helm install --wait returned before both Deployments were available"
    install_s = time.monotonic() - t0
    nodes = {p["spec"].get("nodeName") for c in ("webhook", "controller") for p in pods(api, c)}
    assert nodes == {NODE_NAME}, nodes
    progress(f"installed and ready in {install_s:.0f} s")

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

    # 4. uninstall; pods can still be created
    helm(lc, "uninstall", RELEASE, "-n", NAMESPACE)
    wait_for(
        lambda: not pods(api, "webhook") and not pods(api, "controller"), 120, "the release's pods are gone"
    )
    for i in range(3):
        api.create(PODS, unschedulable_pod(f"after-{i}"))
    left = {p["metadata"]["name"] for p in api.get(PODS)["items"]}
    assert {f"after-{i}" for i in range(3)} <= left

    summary = (
        f"deploy: install ready in {install_s:.0f} s; "
        + "; ".join(f"{phase}: {t.line()}" for phase, t in phases.items())
        + f"; over-admitted {load.over_admitted}; uninstall: pods create"
    )
    print("\n" + summary, flush=True)
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(summary + "\n")
    for phase, t in phases.items():
        assert t.admitted > 0, f"{phase}: nothing was admitted"
    assert load.over_admitted == 0, f"{load.over_admitted} PodGroups beyond the quota were live at once"
