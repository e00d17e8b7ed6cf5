"""Shared by the e2e tests of single-pod preemption (test_pod_preemptor.py,
test_preemption_policies.py, test_preemption_selection.py, test_preemption_scheduler_filters.py):
a control plane in priogate's preemptor mode (kube-scheduler's preemption shaped by priogate's
preempt extender) with the policy flags a module asks for, and `Side`, one control plane as the
admin and its tenants (the built-in `edit` role, tests/e2e/tenant.py), with the scenarios'
building blocks (pods pinned to nodes that fill them, the preemption evidence on pods).

The test run's cluster (conftest.py) is the default mode, where kube-scheduler preempts; the
`default_cluster_side` / `default_side` fixtures there wrap it in a `Side`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from localcluster import LocalCluster, Options
from localcluster.components import GRACEFUL_DELETE_ANNOTATION
from localcluster.objects import NODE_PREFIX
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path
from priogate.resources import format_quantity, parse_quantity, pod_requests
from tests.builders import pod, priority_class
from tests.e2e.controller_helpers import metric
from tests.e2e.helpers import unique, wait_for
from tests.e2e.tenant import Tenant, make_tenant

CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
GRACE = 4  # seconds a victim stays Terminating (kwok honours it for annotated pods)
QUIET = 15.0  # seconds a negative waits: more than the controller's 10 s resync


@contextmanager
def preemptor_cluster(
    tmp_path_factory: pytest.TempPathFactory, name: str, *controller_args: str, **options: Any
) -> Iterator[LocalCluster]:
    """A control plane of its own in the preemptor mode (`python -m localcluster up
    --preemptor=priogate` starts the same), the controller run with `controller_args` (the
    policy flags), for a module-scoped fixture."""
    # kube-scheduler retries a pod it left unschedulable on cluster events, else at its flush
    # (every 30 s, pods older than --pod-max-in-unschedulable-pods-duration, 5 minutes by
    # default): a pod the extender kept from preempting (start delay, PDB) is retried sooner.
    settings: dict[str, Any] = {"nodes": 2, "webhook_workers": 1, "unschedulable_flush_s": 5, **options}
    cluster = LocalCluster(
        Options(
            state_dir=tmp_path_factory.mktemp(name),
            preemptor="priogate",
            controller_args=tuple(controller_args),
            **settings,
        )
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def millicpu(value: Fraction) -> str:
    return format_quantity(Fraction(int(value * 1000), 1000))


class Side:
    """One control plane, as the admin (`client`) and as a tenant."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.client: ApiClient = load_client(str(cluster.kubeconfig))
        self.api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.core = k8s.CoreV1Api(self.api)
        self.classes: list[str] = []
        self.tenants: list[Tenant] = []

    def tenant(self) -> Tenant:
        tenant = make_tenant(self.cluster, self.core, k8s.RbacAuthorizationV1Api(self.api))
        self.tenants.append(tenant)
        return tenant

    def priority_class(self, prefix: str, value: int, policy: str = "PreemptLowerPriority") -> str:
        name = unique(prefix)
        self.client.create(CLASSES, priority_class(name, value=value, preemption_policy=policy))
        self.classes.append(name)
        return name

    def end_scenario(self) -> None:
        """Delete the scenario's tenants (their namespaces and pods): the next one fills the
        nodes afresh."""
        for tenant in self.tenants:
            tenant.api_client.close()
            self.core.delete_namespace(tenant.namespace, propagation_policy="Background")
        self.tenants = []

    def close(self) -> None:
        self.end_scenario()
        for name in self.classes:
            try:
                self.client.delete(f"{CLASSES}/{name}")
            except ApiError as e:
                if e.status != 404:
                    raise
        self.api.close()

    # ---- the cluster's pods --------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.client.get(resource_path("v1", "pods", namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def free_cpu(self) -> dict[str, Fraction]:
        nodes = self.client.get("/api/v1/nodes", query=[("labelSelector", "type=kwok")])["items"]
        free = {n["metadata"]["name"]: parse_quantity(n["status"]["allocatable"]["cpu"]) for n in nodes}
        for p in self.client.get("/api/v1/pods")["items"]:
            node = p["spec"].get("nodeName")
            if node in free and p["status"].get("phase") not in ("Succeeded", "Failed"):
                free[node] -= pod_requests(p).get("cpu", Fraction(0))
        return free

    def settle(self) -> None:
        """Until no pod of an earlier scenario is left on the nodes: they leave a little after
        their namespace is deleted, and sizing new pods before that would leave room once they go."""

        def settled() -> bool:
            leaving = {
                n["metadata"]["name"]
                for n in self.client.get("/api/v1/namespaces")["items"]
                if (n.get("status") or {}).get("phase") == "Terminating"
            }
            return not [
                p
                for p in self.client.get("/api/v1/pods")["items"]
                if str(p["spec"].get("nodeName") or "").startswith(NODE_PREFIX)
                and (p["metadata"].get("deletionTimestamp") or p["metadata"]["namespace"] in leaving)
            ]

        wait_for(settled, 90, "no pod of an earlier scenario is left on the nodes")

    def place(
        self,
        tenant: Tenant,
        name: str,
        node: str,
        klass: str,
        cpu: str | None,
        labels: Mapping[str, str] | None = None,
        **kw: Any,
    ) -> str:
        """A pod the tenant creates, pinned to `node` (nodeSelector), Terminating for GRACE
        seconds once deleted. `kw`: more of tests.builders.pod's arguments (limits, memory,
        group)."""
        manifest = pod(
            name,
            namespace=None,
            cpu=cpu,
            priority_class=klass,
            node_selector={"kubernetes.io/hostname": node},
            labels=labels,
            annotations={GRACEFUL_DELETE_ANNOTATION: "true"},
            **kw,
        )
        manifest["spec"]["terminationGracePeriodSeconds"] = GRACE
        tenant.core.create_namespaced_pod(tenant.namespace, manifest)
        return name

    def fill(self, tenant: Tenant, low: str, labels: dict[str, str] | None = None) -> list[str]:
        """One pod per kwok node taking all its free cpu, created by the tenant. The tenant also
        forges priogate annotations on them: neither makes a pod immune (only the opt-out label
        does, and only where priogate preempts)."""
        self.settle()
        names = []
        for node, cpu in sorted(self.free_cpu().items()):
            name = f"low-{node.removeprefix(NODE_PREFIX)}"
            manifest = pod(
                name,
                namespace=None,
                cpu=millicpu(cpu),
                priority_class=low,
                node_selector={"kubernetes.io/hostname": node},
                labels=labels,
                annotations={
                    GRACEFUL_DELETE_ANNOTATION: "true",
                    "priogate.io/allow-preemption": "false",  # an annotation: not the opt-out label
                    "priogate.io/preemption": '{"forged": true}',
                },
            )
            manifest["spec"]["terminationGracePeriodSeconds"] = GRACE
            tenant.core.create_namespaced_pod(tenant.namespace, manifest)
            names.append(name)
        self.wait_running(tenant.namespace, names, "the low-priority pods run")
        return names

    def wait_running(self, namespace: str, names: list[str], what: str, timeout: float = 90) -> None:
        def check() -> bool:
            return all(self.running(namespace, n) for n in names)

        wait_for(check, timeout, f"{what} ({', '.join(names)} in {namespace})", 0.2)

    def running(self, namespace: str, name: str) -> bool:
        obj = self.pod(namespace, name)
        return obj is not None and (obj.get("status") or {}).get("phase") == "Running"

    def create(self, namespace: str, name: str, klass: str, cpu: str | None = "1", **kw: Any) -> None:
        """A pod the admin creates (`kw`: more of tests.builders.pod's arguments)."""
        self.client.create(
            resource_path("v1", "pods", namespace),
            pod(name, namespace=None, cpu=cpu, priority_class=klass, **kw),
        )

    def condition(self, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
        for c in ((self.pod(namespace, name) or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == kind:
                return c
        return None

    def unschedulable(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod's PodScheduled=False condition (kube-scheduler tried and could not place it)."""
        c = self.condition(namespace, name, "PodScheduled")
        return c if c is not None and c.get("status") == "False" else None

    def disruption(self, namespace: str, names: list[str]) -> dict[str, str]:
        """Victim name -> the reason of its DisruptionTarget condition, for those that have one."""
        found = {}
        for name in names:
            c = self.condition(namespace, name, "DisruptionTarget")
            if c is not None and c.get("status") == "True":
                found[name] = c.get("reason", "")
        return found

    def disrupted_until_running(
        self, namespace: str, names: list[str], preemptor: str, timeout: float
    ) -> dict[str, str]:
        """Every DisruptionTarget reason seen on `names` until `preemptor` runs: victims go
        GRACE seconds after they are marked, so they are collected while it waits."""
        seen: dict[str, str] = {}

        def check() -> bool:
            seen.update(self.disruption(namespace, names))
            return self.running(namespace, preemptor)

        wait_for(check, timeout, f"{namespace}/{preemptor} runs after preempting", 0.2)
        seen.update(self.disruption(namespace, names))
        return seen

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.client.get(resource_path("events.k8s.io/v1", "events", namespace))["items"]

    def answers(self, result: str | None = None) -> float:
        """The preempt extender's answers to kube-scheduler so far
        (priogate_extender_answers_total, of one result or all): proof that kube-scheduler
        consulted it while a test waits for an absence."""
        assert self.cluster.ports is not None
        labels = {"result": result} if result else None
        return metric(self.cluster.ports.controller_url, "priogate_extender_answers_total", labels)
