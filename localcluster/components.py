"""Command lines of the control-plane components. Everything listens on 127.0.0.1 only.

Flag choices follow the defaults of controller-runtime's envtest and of kwokctl, checked
against the binaries built by hack/controlplane/build.sh.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from localcluster.pki import Pki, write_webhook_kubeconfig

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
# kwok manages only nodes carrying this annotation (kwok's own convention).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Stage files copied from kwok's module into the binary cache (hack/controlplane/build.sh)...
KWOK_STAGE_FILES = (
    "node-fast-node-initialize.yaml",
    "node-heartbeat-with-lease-node-heartbeat-with-lease.yaml",
    "pod-fast-pod-ready.yaml",
    "pod-fast-pod-complete.yaml",
)
# ... and the repo's own, in place of kwok's fast pod-delete: pods annotated
# GRACEFUL_DELETE_ANNOTATION, or with a preStop hook, stay Terminating for their
# terminationGracePeriodSeconds, the others go at once as before.
REPO_KWOK_STAGES = Path(__file__).parent / "kwok-stages"
REPO_KWOK_STAGE_FILES = ("pod-delete.yaml", "pod-delete-graceful.yaml", "pod-delete-prestop.yaml")
GRACEFUL_DELETE_ANNOTATION = "priogate.io/kwok-graceful-delete"
# The preemptor mode's scheduler profile, as shipped for admins (docs/preemption.md, "The preemptor mode").
SCHEDULER_CONFIG = (
    Path(__file__).resolve().parent.parent / "manifests" / "scheduler" / "kube-scheduler-config.yaml"
)
# Native PodGroups and Workloads (scheduling.k8s.io/v1alpha2, alpha in 1.36): the API version is
# off by default and the gates form a chain (WorkloadAwarePreemption needs GangScheduling needs
# GenericWorkload, pkg/features/kube_features.go). WorkloadAwarePreemption is the gate under
# which the Priority plugin resolves a PodGroup's class (admission.go admitPodGroup) and the
# priority fields exist at all. The controller-manager needs GenericWorkload for its
# podgroup-protection controller, which removes the finalizer admission puts on every PodGroup
# (without it a namespace holding one never goes away); the scheduler, to schedule gangs.
NATIVE_PODGROUP_GATES = (
    "--feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true"
)
NATIVE_PODGROUP_API = "--runtime-config=scheduling.k8s.io/v1alpha2=true"


@dataclass(frozen=True)
class Ports:
    etcd: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    webhook: int
    controller: int  # the priogate controller's /healthz and /metrics (plain HTTP)
    # The webhook's plain-HTTP /healthz, /readyz and /metrics (--health-bind); 0: not served.
    webhook_health: int = 0
    # The controller's preempt extender (HTTPS, --extender-bind), in the preemptor mode.
    extender: int = 0

    @property
    def extender_url(self) -> str:
        return f"https://{LOOPBACK}:{self.extender}/scheduler"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOOPBACK}:{self.etcd}"

    @property
    def apiserver_url(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver}"

    @property
    def webhook_url(self) -> str:
        return f"https://{LOOPBACK}:{self.webhook}"

    @property
    def webhook_health_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webhook_health}"

    @property
    def controller_url(self) -> str:
        return f"http://{LOOPBACK}:{self.controller}"


@dataclass(frozen=True)
class ApiServerMode:
    """What differs between restarts of kube-apiserver in one session."""

    # Keep the built-in Priority admission plugin (default: disabled, priogate replaces it).
    priority_plugin: bool = False
    # Path of an AdmissionConfiguration file, if any: its plugins' configurations go into the
    # --admission-control-config-file kube-apiserver gets (admission_configuration).
    admission_config: Path | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)


def etcd(bin_dir: Path, data_dir: Path, ports: Ports) -> list[str]:
    peer = f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        str(bin_dir / "etcd"),
        "--name=node0",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={ports.etcd_url}",
        f"--advertise-client-urls={ports.etcd_url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=node0={peer}",
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        "--log-level=warn",
    ]


WEBHOOK_PLUGINS = ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")


def admission_configuration(base: Path | None, webhook_kubeconfig: Path | None) -> dict[str, Any] | None:
    """One AdmissionConfiguration (kube-apiserver reads a single --admission-control-config-file):
    the plugins of `base` (e.g. ResourceQuota's limitedResources), plus, with `webhook_kubeconfig`,
    the webhook plugins' WebhookAdmissionConfiguration naming it, which makes kube-apiserver
    present that kubeconfig's client certificate to the webhooks.
    https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#authenticate-apiservers
    """
    config: dict[str, Any] = yaml.safe_load(base.read_text()) if base is not None else {}
    plugins = list(config.get("plugins") or [])
    if webhook_kubeconfig is not None:
        clash = sorted({p["name"] for p in plugins} & set(WEBHOOK_PLUGINS))
        if clash:
            raise ValueError(f"{base} configures {', '.join(clash)} already; it cannot be merged")
        plugins += [
            {
                "name": name,
                "configuration": {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": str(webhook_kubeconfig),
                },
            }
            for name in WEBHOOK_PLUGINS
        ]
    if not plugins:
        return None
    return {
        "apiVersion": config.get("apiVersion", "apiserver.config.k8s.io/v1"),
        "kind": "AdmissionConfiguration",
        "plugins": plugins,
    }


def write_admission_config(
    state_dir: Path, mode: ApiServerMode, pki: Pki, mtls_webhook_url: str | None
) -> Path | None:
    """kube-apiserver's --admission-control-config-file, in `state_dir`: the mode's plugins, and
    with mTLS (`mtls_webhook_url`, the webhook's) the webhook plugins' kubeconfig
    (admission_configuration). Rewritten on every (re)start, since kube-apiserver reads it only
    then."""
    webhook_kubeconfig = None
    if mtls_webhook_url is not None:
        webhook_kubeconfig = state_dir / "webhook-client.kubeconfig"
        host = mtls_webhook_url.removeprefix("https://")
        write_webhook_kubeconfig(webhook_kubeconfig, host, pki)
    config = admission_configuration(mode.admission_config, webhook_kubeconfig)
    if config is None:
        return None
    path = state_dir / "admission-configuration.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def kube_apiserver(
    bin_dir: Path, pki: Pki, ports: Ports, mode: ApiServerMode, admission_config: Path | None
) -> list[str]:
    """`admission_config`: the file for --admission-control-config-file, written from
    admission_configuration (the mode's plugins and the webhook's)."""
    args = [
        str(bin_dir / "kube-apiserver"),
        f"--etcd-servers={ports.etcd_url}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.apiserver_crt}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_crt}",
        f"--service-account-issuer=https://{LOOPBACK}:{ports.apiserver}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        # The kubernetes Service would point at 127.0.0.1, which Endpoints validation refuses.
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        # Without it, open watches (controllers, kwok, the webhook) hold a SIGTERM for 60 s.
        "--shutdown-watch-termination-grace-period=2s",
        NATIVE_PODGROUP_GATES,
        NATIVE_PODGROUP_API,
    ]
    if not mode.priority_plugin:
        args.append("--disable-admission-plugins=Priority")
    if admission_config is not None:
        args.append(f"--admission-control-config-file={admission_config}")
    args.extend(mode.extra_args)
    return args


def kube_controller_manager(bin_dir: Path, pki: Pki, kubeconfig: Path, ports: Ports) -> list[str]:
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        "--leader-elect=false",
        "--controllers=*",
        f"--root-ca-file={pki.ca_crt}",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--resource-quota-sync-period=10s",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        NATIVE_PODGROUP_GATES,
    ]


def scheduler_config(kubeconfig: Path, extender_url: str = "", ca_file: Path | None = None) -> dict[str, Any]:
    """manifests/scheduler/'s KubeSchedulerConfiguration (DefaultPreemption on, priogate's
    preempt extender) with what the flags set otherwise: with --config, kube-scheduler ignores
    the deprecated --kubeconfig (cmd/kube-scheduler/app/options/options.go ApplyTo applies the
    deprecated flags only without a config file), so the client connection and leader election
    move into the file; and the extender at the local controller (loopback), trusted by `ca_file`."""
    config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    config["leaderElection"] = {"leaderElect": False}
    for extender in config.get("extenders") or ():
        if extender_url:
            extender["urlPrefix"] = extender_url
        if ca_file is not None:
            extender["tlsConfig"] = {"caFile": str(ca_file)}
    return config


def write_scheduler_config(
    path: Path, kubeconfig: Path, extender_url: str = "", ca_file: Path | None = None
) -> None:
    path.write_text(yaml.safe_dump(scheduler_config(kubeconfig, extender_url, ca_file), sort_keys=False))


def kube_scheduler(
    bin_dir: Path,
    kubeconfig: Path,
    ports: Ports,
    config: Path | None = None,
    unschedulable_flush_s: float | None = None,
) -> list[str]:
    """`config`: a KubeSchedulerConfiguration file (scheduler_config); it then holds the
    kubeconfig and leader election, and the serving and delegated-auth flags stay flags.
    `unschedulable_flush_s`: how long a pod may wait in the unschedulable pool before it is
    retried without an event (None: kube-scheduler's 5 min). Only a flag, applied with or
    without --config (cmd/kube-scheduler/app/options/options.go ApplyTo)."""
    client = [f"--config={config}"] if config else [f"--kubeconfig={kubeconfig}", "--leader-elect=false"]
    flush = (
        []
        if unschedulable_flush_s is None
        else [f"--pod-max-in-unschedulable-pods-duration={unschedulable_flush_s:g}s"]
    )
    return [
        str(bin_dir / "kube-scheduler"),
        *client,
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        *flush,
        NATIVE_PODGROUP_GATES,
    ]


def kwok(bin_dir: Path, kubeconfig: Path) -> list[str]:
    stages = bin_dir / "kwok-stages"
    missing = [f for f in KWOK_STAGE_FILES if not (stages / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"kwok stage files {missing} are missing from {stages}; "
            "rebuild with `python -m localcluster build`"
        )
    return [
        str(bin_dir / "kwok"),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
        "--node-lease-duration-seconds=40",
        f"--cidr={POD_CIDR}",
        "--node-ip=10.240.0.1",
        *(f"--config={stages / f}" for f in KWOK_STAGE_FILES),
        *(f"--config={REPO_KWOK_STAGES / f}" for f in REPO_KWOK_STAGE_FILES),
    ]


def webhook(
    pki: Pki, kubeconfig: Path, ports: Ports, workers: int, *extra: str, mtls: bool = True
) -> list[str]:
    """`mtls`: require kube-apiserver's client certificate (pki.webhook_client_crt); `extra`: more
    flags."""
    return [
        sys.executable,
        "-m",
        "webhook",
        f"--cert-file={pki.webhook_crt}",
        f"--key-file={pki.webhook_key}",
        f"--bind={LOOPBACK}:{ports.webhook}",
        f"--kubeconfig={kubeconfig}",
        f"--workers={workers}",
        *([f"--client-ca-file={pki.webhook_client_ca_crt}"] if mtls else []),
        *([f"--health-bind={LOOPBACK}:{ports.webhook_health}"] if ports.webhook_health else []),
        *extra,
    ]


def controller(kubeconfig: Path, port: int, *extra: str) -> list[str]:
    """The priogate controller (`python -m controller run`), leader-elected like in a cluster."""
    return [
        sys.executable,
        "-m",
        "controller",
        "run",
        f"--kubeconfig={kubeconfig}",
        f"--bind={LOOPBACK}:{port}",
        *extra,
    ]
