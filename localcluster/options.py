"""The local cluster's options (python -m localcluster's flags, the e2e fixture's choices): its size,
the mode, which of priogate's programs run and how."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import REPO
from webhook.policy import WebhookPolicy

PREEMPTORS = ("kube-scheduler", "priogate")


@dataclass
class Options:
    state_dir: Path = REPO / ".local"
    nodes: int = 3
    node_cpu: str = "8"
    node_memory: str = "32Gi"
    node_pods: int = 110
    # What a real kubelet reports for its disk: priogate's own pods request ephemeral-storage
    # (manifests/), which the scheduler refuses on a node that advertises none.
    node_ephemeral_storage: str = "100Gi"
    # Keep kube-apiserver's built-in Priority admission plugin (docs/modes.md).
    priority_plugin: bool = False
    # Register the preemption preview hook (docs/priorityclass-policy.md); the webhook serves it
    # either way (python -m webhook serves every server by default).
    preemption_preview: bool = False
    webhook: bool = True
    webhook_workers: int = 2
    # Mutual TLS between kube-apiserver and the webhook: the webhook requires a client certificate
    # (--client-ca-file), kube-apiserver presents one (WebhookAdmissionConfiguration).
    mtls: bool = True
    controller: bool = True
    # None: the mode's default (docs/modes.md).
    policy: WebhookPolicy | None = None
    start_timeout: float = 120.0
    bin_dir: Path | None = None
    # The webhook's and controller's --cache-quiet-seconds (None: their default). Tests that
    # stop kube-apiserver use a short one so a quiet watch is noticed within the test.
    cache_quiet_seconds: float | None = None
    # More flags for the controller (e.g. a short --reclaim-seconds).
    controller_args: tuple[str, ...] = ()
    # Who shapes single-pod preemption: "kube-scheduler" (its DefaultPreemption alone; priogate
    # only for gangs) or "priogate" (kube-scheduler runs manifests/scheduler/'s profile,
    # DefaultPreemption with priogate's preempt extender, and the controller serves it with
    # --pod-preemption on loopback).
    preemptor: str = "kube-scheduler"
    # kube-scheduler's --pod-max-in-unschedulable-pods-duration in seconds (None: its 5 min).
    unschedulable_flush_s: float | None = None
    # A real node (containerd + kubelet, localcluster/node.py) beside the kwok ones: containers
    # start. Needs root.
    real_node: bool = False

    def __post_init__(self) -> None:
        if self.preemptor not in PREEMPTORS:
            raise ValueError(f"preemptor must be one of {PREEMPTORS}, not {self.preemptor!r}")

    def preemptor_flags(self) -> tuple[str, ...]:
        """The controller's flags for the preemptor mode."""
        return ("--pod-preemption",) if self.preemptor == "priogate" else ()

    def quiet_flags(self) -> tuple[str, ...]:
        q = self.cache_quiet_seconds
        return () if q is None else (f"--cache-quiet-seconds={q}",)
