"""One real control plane per test session (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok, the priogate webhook), one namespace per test.

A control plane that does not start fails every e2e test with the reason and the component
logs. It is never a skip: not under CI=true, and not locally either.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster, Options
from localcluster.webhooks import PROBE_NAMESPACE
from priogate.class_users import FORCE_DELETE_ANNOTATION
from priogate.kube.client import ApiClient, load_client
from tests.e2e.helpers import Admission, Kubectl, delete_namespace, ensure_namespace, unique
from tests.e2e.plugin import install_launcher
from tests.e2e.preemptor_side import Side
from tests.e2e.tenant import Tenant, tenant_fixture
from webhook.policy import WebhookPolicy

_figures: dict[str, str] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _figures:
        terminalreporter.section("local control plane (measured by the e2e session)")
        for key, value in _figures.items():
            terminalreporter.write_line(f"{key}: {value}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state_dir = tmp_path_factory.mktemp("localcluster")
    workers = int(os.environ.get("PRIOGATE_E2E_WEBHOOK_WORKERS", "2"))
    lc = LocalCluster(Options(state_dir=state_dir, nodes=3, webhook_workers=workers))
    try:
        lc.start()
    except Exception as e:
        ci = " (CI=true: this is a failure, never a skip)" if os.environ.get("CI") == "true" else ""
        pytest.fail(
            f"the local control plane did not start{ci}: {e}\n"
            f"component logs: {state_dir / 'logs'}\n"
            "build or rebuild the binaries with `python -m localcluster build`; "
            "start it by hand with `python -m localcluster run` to watch it",
            pytrace=False,
        )
    t = lc.timings
    _figures["warm start (control plane + webhook, binaries built)"] = f"{t['warm-start']:.1f} s"
    _figures["start phases"] = ", ".join(
        f"{k} {v:.1f} s" for k, v in t.items() if k not in ("total", "warm-start")
    )
    _figures["VmRSS after start"] = ", ".join(f"{k} {v / 1024:.0f} MiB" for k, v in lc.memory_kib().items())
    try:
        yield lc
    finally:
        _figures["VmRSS at the end"] = ", ".join(
            f"{k} {v / 1024:.0f} MiB" for k, v in lc.memory_kib().items()
        )
        if "apiserver-restart" in lc.timings:
            _figures["kube-apiserver restart (last)"] = f"{lc.timings['apiserver-restart']:.1f} s"
        lc.stop()


@pytest.fixture(scope="session")
def api_client(cluster: LocalCluster) -> k8s.ApiClient:
    return k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def core(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def scheduling(api_client: k8s.ApiClient) -> k8s.SchedulingV1Api:
    return k8s.SchedulingV1Api(api_client)


@pytest.fixture(scope="session")
def rbac(api_client: k8s.ApiClient) -> k8s.RbacAuthorizationV1Api:
    return k8s.RbacAuthorizationV1Api(api_client)


@pytest.fixture
def tenant(cluster: LocalCluster, core: k8s.CoreV1Api, rbac: k8s.RbacAuthorizationV1Api) -> Iterator[Tenant]:
    """A namespace of its own and a user bound to `edit` there only (tests/e2e/tenant.py)."""
    yield from tenant_fixture(cluster, core, rbac)


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding an executable kubectl-priogate that runs this checkout's plugin."""
    return install_launcher(tmp_path_factory.mktemp("plugin-bin"))


@pytest.fixture(scope="session")
def kubectl(cluster: LocalCluster) -> Kubectl:
    return Kubectl(cluster.kubeconfig)


@pytest.fixture(scope="session")
def admin(cluster: LocalCluster) -> ApiClient:
    """priogate's own JSON client as the cluster admin (enough connections for the races)."""
    return load_client(str(cluster.kubeconfig), pool_size=32)


@pytest.fixture(scope="session")
def admission(cluster: LocalCluster, core: k8s.CoreV1Api) -> Admission:
    ensure_namespace(core, PROBE_NAMESPACE)
    return Admission(core, PROBE_NAMESPACE)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core: k8s.CoreV1Api) -> Iterator[str]:
    name = unique("e2e-" + request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:40])
    ensure_namespace(core, name)
    yield name
    delete_namespace(core, name)


class ClassTracker:
    """PriorityClasses a test creates (cluster-scoped), deleted when the test ends."""

    def __init__(self, scheduling: k8s.SchedulingV1Api) -> None:
        self.scheduling = scheduling
        self.names: list[str] = []

    def name(self, prefix: str) -> str:
        n = unique(prefix)
        self.names.append(n)
        return n

    def cleanup(self) -> None:
        """Delete the classes, forced: a test's objects that still name one (in a namespace
        torn down after this) must not keep it (docs/priorityclass-deletes.md)."""
        for n in self.names:
            self.delete(n)

    def delete(self, name: str) -> None:
        """Delete one class now, forced (a globalDefault must not outlive its test)."""
        forced = {"metadata": {"annotations": {FORCE_DELETE_ANNOTATION: "true"}}}
        try:
            self.scheduling.patch_priority_class(name, forced)
            self.scheduling.delete_priority_class(name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture
def classes(scheduling: k8s.SchedulingV1Api) -> Iterator[ClassTracker]:
    tracker = ClassTracker(scheduling)
    yield tracker
    tracker.cleanup()


@pytest.fixture(scope="module")
def default_cluster_side(cluster: LocalCluster) -> Iterator[Side]:
    """The test run's cluster (the default mode: kube-scheduler preempts) as a preemption
    scenario's `Side` (tests/e2e/preemptor_side.py)."""
    side = Side(cluster)
    yield side
    side.close()


@pytest.fixture
def default_side(default_cluster_side: Side) -> Iterator[Side]:
    """The default mode, for one scenario."""
    yield default_cluster_side
    default_cluster_side.end_scenario()


@pytest.fixture(scope="module", params=["plugin-replaced", "plugin-kept"])
def mode(request: pytest.FixtureRequest, cluster: LocalCluster) -> Iterator[str]:
    """The cluster in one mode (docs/modes.md) for the tests of a module that asks for it, the
    plugin replaced and then kept; the test run's mode again afterwards."""
    if request.param == "plugin-replaced":
        assert cluster.mode.priority_plugin is False
        yield request.param
        return
    assert cluster.webhooks is not None
    hook = cluster.supervisor.get("webhook")
    default_mode = cluster.mode

    def switch(plugin: bool) -> None:
        cluster.webhooks.unregister()
        cluster.webhooks.register(WebhookPolicy.for_mode(priority_plugin=plugin))
        cluster.restart_apiserver(dataclasses.replace(default_mode, priority_plugin=plugin))
        cluster.webhooks.probe(priority_plugin=plugin, proc=hook)

    switch(True)
    try:
        yield request.param
    finally:
        switch(default_mode.priority_plugin)
