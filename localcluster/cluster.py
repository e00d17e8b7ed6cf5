"""The local control plane with priogate inside it: start in dependency order, stop in reverse.

    etcd -> kube-apiserver -> kubeconfig -> kube-controller-manager, kube-scheduler, kwok
         -> fake nodes -> webhook -> webhook configurations -> probe -> controller

Used by `python -m localcluster` (run/up) and by the e2e session fixture.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3

from localcluster import components
from localcluster.api import Etcd, apiserver_ready, create_or_replace
from localcluster.binaries import REPO, ensure_binaries
from localcluster.components import LOOPBACK, ApiServerMode, Ports
from localcluster.node import NODE_NAME, RealNode
from localcluster.objects import create_fake_nodes, install_crds
from localcluster.options import Options
from localcluster.pki import CONTROLLER_USER, Pki, issue_all, write_kubeconfig
from localcluster.procs import Proc, Supervisor, children, free_ports, progress, rss_kib, stop_pid, wait_until
from localcluster.readiness import fake_nodes_ready, healthz_ok, http_ok, node_ready
from localcluster.webhooks import PRIOGATE_NAMESPACE, Webhooks
from priogate.kube.client import ApiClient, ApiError, load_client
from webhook.policy import WebhookPolicy


@dataclass
class LocalCluster:
    options: Options
    supervisor: Supervisor = field(default_factory=Supervisor)
    timings: dict[str, float] = field(default_factory=dict)
    mode: ApiServerMode = field(default_factory=ApiServerMode)
    ports: Ports | None = None
    pki: Pki | None = None
    api: ApiClient | None = None
    etcd: Etcd | None = None
    webhooks: Webhooks | None = None
    etcd_data: Path | None = None
    bin_dir: Path | None = None
    node: RealNode | None = None

    @property
    def state_dir(self) -> Path:
        return self.options.state_dir

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def controller_kubeconfig(self) -> Path:
        """The controller's own identity (CONTROLLER_USER): the only one the webhook lets
        write priogate.io/ annotations on PodGroups."""
        return self.state_dir / "controller.kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def webhook_client_ca(self) -> Path | None:
        """The --client-ca-file of every webhook server started here; None without mTLS."""
        return self.pki.webhook_client_ca_crt if self.pki and self.options.mtls else None

    @property
    def webhook_client_cert(self) -> tuple[Path, Path] | None:
        """(certificate, key) for a direct request to a webhook server; None without mTLS."""
        if self.pki is None or not self.options.mtls:
            return None
        return self.pki.webhook_client_crt, self.pki.webhook_client_key

    def _log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    # ---- start -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start everything; on failure stop what was started and re-raise (logs stay in state_dir)."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        o = self.options
        t_total = time.monotonic()
        self.bin_dir = o.bin_dir or ensure_binaries()
        t_warm = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.logs.exists():
            shutil.rmtree(self.logs)
        self.ports = Ports(*free_ports(9))
        self.pki = issue_all(self.state_dir / "pki")
        # With a real node, webhook calls go to a Service's endpoints (pod IPs, reachable from the
        # host) rather than its ClusterIP, which nothing here routes (localcluster/node.py).
        # And kube-apiserver reaches kubelet (kubectl logs) at the node's IP, not its name, with a
        # client certificate kubelet's x509 authentication accepts (the cluster's CA).
        routing = (
            (
                "--enable-aggregator-routing=true",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={self.pki.admin_crt}",
                f"--kubelet-client-key={self.pki.admin_key}",
            )
            if o.real_node
            else ()
        )
        self.mode = ApiServerMode(priority_plugin=o.priority_plugin, extra_args=routing)

        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
        self.etcd_data = base / f"priogate-etcd-{uuid.uuid4().hex[:8]}"
        progress(f"starting etcd (data in {self.etcd_data})")
        proc = self.supervisor.start(
            "etcd", components.etcd(self.bin_dir, self.etcd_data, self.ports), self._log("etcd")
        )
        self.etcd = Etcd(self.ports.etcd_url)
        self.timings["etcd"] = wait_until(
            self.etcd.healthy, timeout=30, what="etcd /health is true", proc=proc
        )

        write_kubeconfig(self.kubeconfig, self.ports.apiserver_url, self.pki)
        write_kubeconfig(
            self.controller_kubeconfig,
            self.ports.apiserver_url,
            self.pki,
            CONTROLLER_USER,
            self.pki.controller_crt,
            self.pki.controller_key,
        )
        self.api = load_client(str(self.kubeconfig))
        self.timings["kube-apiserver"] = self._start_apiserver()

        progress("starting kube-controller-manager, kube-scheduler and kwok")
        t0 = time.monotonic()
        kcm = self.supervisor.start(
            "kube-controller-manager",
            components.kube_controller_manager(self.bin_dir, self.pki, self.kubeconfig, self.ports),
            self._log("kube-controller-manager"),
        )
        scheduler_config = None
        if o.preemptor == "priogate":
            scheduler_config = self.state_dir / "kube-scheduler-config.yaml"
            components.write_scheduler_config(
                scheduler_config, self.kubeconfig, self.ports.extender_url, self.pki.ca_crt
            )
        sched = self.supervisor.start(
            "kube-scheduler",
            components.kube_scheduler(
                self.bin_dir, self.kubeconfig, self.ports, scheduler_config, o.unschedulable_flush_s
            ),
            self._log("kube-scheduler"),
        )
        kwok = self.supervisor.start(
            "kwok", components.kwok(self.bin_dir, self.kubeconfig), self._log("kwok")
        )
        wait_until(
            lambda: healthz_ok(self.ports.controller_manager), timeout=60, what="/healthz is ok", proc=kcm
        )
        wait_until(lambda: healthz_ok(self.ports.scheduler), timeout=60, what="/healthz is ok", proc=sched)
        # The serviceaccount controller is running once `default` has its ServiceAccount.
        wait_until(
            lambda: bool(self.api.get("/api/v1/namespaces/default/serviceaccounts/default")),
            timeout=60,
            what="serviceaccount default/default exists (kube-controller-manager works)",
            proc=kcm,
        )
        self.timings["controllers"] = time.monotonic() - t0

        t0 = time.monotonic()
        create_fake_nodes(self.api, o)
        wait_until(
            lambda: fake_nodes_ready(self.api, o.nodes),
            timeout=60,
            what=f"{o.nodes} fake nodes are Ready and untainted",
            proc=kwok,
        )
        self.timings["nodes"] = time.monotonic() - t0
        if o.real_node:
            t0 = time.monotonic()
            self.node = RealNode(self.state_dir, self.pki, self.ports.apiserver, self.supervisor)
            self.node.start()
            wait_until(
                lambda: node_ready(self.api, NODE_NAME),
                timeout=120,
                what=f"node {NODE_NAME} is Ready",
                proc=self.supervisor.get("kubelet"),
            )
            self.timings["real-node"] = time.monotonic() - t0
        self.timings["control-plane"] = time.monotonic() - t_warm

        # priogate's own namespace: the webhook keeps its ledgers there, the
        # controller its Lease.
        create_or_replace(self.api, "/api/v1/namespaces", {"metadata": {"name": PRIOGATE_NAMESPACE}})
        if o.webhook:
            t0 = time.monotonic()
            install_crds(self.api)
            self.webhooks = Webhooks(
                self.api, self.pki, self.ports.webhook_url, client_cert=self.webhook_client_cert
            )
            mtls = "requires kube-apiserver's client certificate" if o.mtls else "no client certificates"
            progress(f"starting the priogate webhook on {self.ports.webhook_url} ({mtls})")
            hook = self._start_webhook()
            policy = o.policy or WebhookPolicy.for_mode(
                priority_plugin=o.priority_plugin, preemption_preview=o.preemption_preview
            )
            self.webhooks.register(policy)
            self.timings["webhook-probe"] = self.webhooks.probe(priority_plugin=o.priority_plugin, proc=hook)
            self.timings["webhook"] = time.monotonic() - t0
        if o.controller:
            t0 = time.monotonic()
            self.start_controller()
            self.timings["controller"] = time.monotonic() - t0
        self.timings["total"] = time.monotonic() - t_total
        self.timings["warm-start"] = time.monotonic() - t_warm

    def extender_flags(self) -> tuple[str, ...]:
        """The controller's flags for the preemptor mode: the extender on loopback, with the
        local serving certificate (the webhook's, issued for 127.0.0.1)."""
        flags = self.options.preemptor_flags()
        if not flags:
            return ()
        assert self.ports and self.pki
        return (
            *flags,
            f"--extender-bind={LOOPBACK}:{self.ports.extender}",
            f"--cert-file={self.pki.webhook_crt}",
            f"--key-file={self.pki.webhook_key}",
        )

    def start_controller(self) -> Proc:
        """The priogate controller, as the component "controller"; ready once its caches synced
        (its /healthz). Its Lease lives in priogate-system, as in a real cluster."""
        assert self.api and self.ports
        if not self.webhooks:
            install_crds(self.api)
        create_or_replace(self.api, "/api/v1/namespaces", {"metadata": {"name": PRIOGATE_NAMESPACE}})
        progress(f"starting the priogate controller (metrics on {self.ports.controller_url})")
        proc = self.supervisor.start(
            "controller",
            components.controller(
                self.controller_kubeconfig,
                self.ports.controller,
                *self.options.quiet_flags(),
                *self.extender_flags(),
                *self.options.controller_args,
            ),
            self._log("controller"),
            cwd=REPO,
        )
        wait_until(
            lambda: http_ok(f"{self.ports.controller_url}/healthz"),
            timeout=60,
            what="the controller's /healthz is 200",
            proc=proc,
        )
        return proc

    def _start_apiserver(self, restart: bool = False) -> float:
        assert self.bin_dir and self.pki and self.ports and self.api
        plugin = "enabled" if self.mode.priority_plugin else "disabled"
        verb = "restarting" if restart else "starting"
        progress(f"{verb} kube-apiserver on {self.ports.apiserver_url} (Priority admission plugin {plugin})")
        o = self.options
        # A real node's pods serve webhooks too (the chart's, with mtls.clientCASecret): the
        # kubeconfig's "*" user presents the client certificate to them as well.
        mtls_webhook_url = self.ports.webhook_url if (o.webhook or o.real_node) and o.mtls else None
        config = components.write_admission_config(self.state_dir, self.mode, self.pki, mtls_webhook_url)
        argv = components.kube_apiserver(self.bin_dir, self.pki, self.ports, self.mode, config)
        if restart:
            proc = self.supervisor.restart("kube-apiserver", argv)
        else:
            proc = self.supervisor.start("kube-apiserver", argv, self._log("kube-apiserver"))
        return wait_until(
            lambda: apiserver_ready(self.api),
            timeout=self.options.start_timeout,
            what="/readyz is 200",
            proc=proc,
        )

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver and leave it stopped (everything else keeps running and retries);
        restart_apiserver starts it again in the same place of the stop order."""
        proc = self.supervisor.get("kube-apiserver")
        progress(f"stopping kube-apiserver (pid {proc.pid})")
        stop_pid(proc.pid, proc.start_time, 15.0, popen=proc.popen)

    def _start_webhook(self, *extra: str) -> Proc:
        o = self.options
        if self.webhooks is None:
            raise RuntimeError("this cluster runs no webhook (Options.webhook)")
        hook = self.supervisor.start(
            "webhook",
            components.webhook(
                self.pki,
                self.kubeconfig,
                self.ports,
                o.webhook_workers,
                *o.quiet_flags(),
                *extra,
                mtls=o.mtls,
            ),
            self._log("webhook"),
            cwd=REPO,
        )
        wait_until(self.webhooks.server_ready, timeout=60, what="the webhook's /readyz is 200", proc=hook)
        return hook

    def restart_webhook(self, *extra: str) -> Proc:
        """Stop the webhook and start it again at the same address with more flags (`extra`),
        such as `--serve=priority` once the quota hooks point elsewhere; waits until it is ready."""
        self.supervisor.stop("webhook")
        return self._start_webhook(*extra)

    def restart_apiserver(self, mode: ApiServerMode) -> float:
        """Stop kube-apiserver and start it again with other flags; the other components reconnect.
        Webhook configurations are read from etcd before the first request is admitted. Returns the
        seconds from stop to /readyz."""
        t0 = time.monotonic()
        self.mode = mode
        self._start_apiserver(restart=True)
        seconds = time.monotonic() - t0
        self.timings["apiserver-restart"] = seconds
        return seconds

    # ---- inspection --------------------------------------------------------------------------

    def memory_kib(self) -> dict[str, int]:
        """VmRSS of each component (gunicorn: master plus workers)."""
        out: dict[str, int] = {}
        for p in self.supervisor.procs:
            pids = [p.pid, *children(p.pid)] if p.name == "webhook" else [p.pid]
            out[p.name] = sum(rss_kib(pid) or 0 for pid in pids)
        return out

    def dead(self) -> list[Proc]:
        return [p for p in self.supervisor.procs if not p.alive()]

    def state(self) -> dict[str, Any]:
        assert self.ports
        return {
            "kubeconfig": str(self.kubeconfig),
            "server": self.ports.apiserver_url,
            "webhook": self.ports.webhook_url if self.webhooks else None,
            "webhook_mtls": bool(self.webhooks and self.options.mtls),
            "priority_plugin": self.mode.priority_plugin,
            "preemptor": self.options.preemptor,
            "etcd_data": str(self.etcd_data) if self.etcd_data else None,
            "components": [p.record() for p in self.supervisor.procs],
            "timings_s": {k: round(v, 2) for k, v in self.timings.items()},
            "rss_kib": self.memory_kib(),
        }

    # ---- stop --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Webhook configurations first (so no request waits on a stopped webhook), then every
        process in reverse start order, then the etcd data directory."""
        api_proc = next((p for p in self.supervisor.procs if p.name == "kube-apiserver"), None)
        if (
            self.webhooks is not None
            and self.webhooks.registered
            and api_proc is not None
            and api_proc.alive()
        ):
            try:
                self.webhooks.unregister()
            except (ApiError, urllib3.exceptions.HTTPError) as e:
                progress(f"could not delete the webhook configurations ({e}); they go away with etcd's data")
        if self.node is not None:
            self._stop_node(self.node)
            self.node = None
        self.supervisor.stop_all()
        if self.etcd_data is not None:
            shutil.rmtree(self.etcd_data, ignore_errors=True)
            self.etcd_data = None

    def _stop_node(self, node: RealNode) -> None:
        """kubelet, then what containerd still runs (a shim outlives containerd), then containerd,
        then the node's mounts and NAT rule."""
        names = {p.name for p in self.supervisor.procs}
        if "kubelet" in names:
            progress("stopping kubelet")
            self.supervisor.stop("kubelet")
        if "containerd" in names:
            progress("stopping the real node's containers, then containerd")
            node.stop_pods()
            self.supervisor.stop("containerd")
        node.cleanup()
