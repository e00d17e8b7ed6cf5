"""A real node beside the kwok ones: containerd (CRI, runc) and kubelet, built from the control
plane's pinned Kubernetes (hack/node/build.sh), pods on a CNI bridge. Containers really start, so
the image and the Helm chart can run here (make test-deploy, docs/image-and-node.md).

    bridge priogate0 (10.245.0.1/24) -> containerd -> pause image -> kubelet -> Node Ready

Routing, without kube-proxy:

* kube-apiserver -> webhook pods: kube-apiserver runs with --enable-aggregator-routing, which makes
  its service resolver (the one the admission webhooks use too) pick an endpoint's pod IP instead
  of the Service's ClusterIP; the host reaches the pod subnet through the bridge.
  (buildServiceResolver in
  https://github.com/kubernetes/kubernetes/blob/v1.36.3/cmd/kube-apiserver/app/server.go)
* kube-apiserver -> kubelet (kubectl logs): kubelet serves on the bridge's address, the
  node's InternalIP, and kube-apiserver presents a client certificate of the cluster's CA, which
  kubelet's x509 authentication trusts.
* pods -> kube-apiserver: kube-apiserver listens on loopback only, and an Endpoints object cannot
  name 127.0.0.1, so kube-proxy would have nothing to route the `kubernetes` Service to. One DNAT
  rule sends the bridge's traffic for 10.96.0.1:443 to 127.0.0.1:<port>, with route_localnet on
  the bridge so the kernel accepts a loopback destination from it (the same trick as kube-proxy's
  localhost NodePorts, https://kubernetes.io/docs/reference/command-line-tools-reference/kube-proxy/).

Needs root, iptables, containerd, runc and the CNI plugins bridge, host-local and loopback
(Debian: containerd runc containernetworking-plugins iptables); ensure_packages installs them with
apt-get when root on Debian. kubelet 1.36 still falls back to its own cgroupDriver with a runtime
that lacks the RuntimeConfig RPC (containerd 1.x, Debian bookworm's 1.6), and runs on cgroups v1
only with failCgroupV1: false (https://kubernetes.io/docs/setup/production-environment/container-runtimes/).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from localcluster.components import LOOPBACK
from localcluster.node_host import (
    BRIDGE,
    GATEWAY,
    POD_SUBNET,
    NodeFailed,
    cni_bin_dir,
    cni_conflist,
    drop_stale_nat_rules,
    ensure_node_binaries,
    ensure_packages,
    run,
)
from localcluster.pki import KUBERNETES_SERVICE_IP, NODE_NAME, Pki, write_kubeconfig
from localcluster.procs import Proc, Supervisor, free_ports, progress, wait_until

PAUSE_IMAGE = "localhost/priogate-pause:3.10"
# Where containerd keeps images and snapshots: outside the repo, kept between runs so an image
# loaded once is not unpacked again (containerd's own default is /var/lib/containerd).
# The same cache root as the build scripts: ${PRIOGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/priogate}.
CACHE_ROOT = Path(
    os.environ.get("PRIOGATE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "priogate"
)


@dataclass
class RealNode:
    """containerd and kubelet for one node, NODE_NAME; start() after kube-apiserver is up."""

    state_dir: Path
    pki: Pki
    apiserver_port: int
    supervisor: Supervisor
    bin_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    healthz_port: int = 0
    _nat_rule: list[str] | None = None

    @property
    def dir(self) -> Path:
        return self.state_dir / "node"

    @property
    def run_dir(self) -> Path:
        """Sockets and kubelet's root (pod volumes are tmpfs mounts under it): short, outside the
        repo, one per state directory."""
        key = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:10]
        return Path("/run/priogate-node") / key

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return CACHE_ROOT / "containerd-root"

    def ctr(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run(
            "ctr", f"--address={self.socket}", "--namespace=k8s.io", *args, check=check, timeout=timeout
        )

    # ---- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        if os.geteuid() != 0:
            raise NodeFailed("the real node needs root (containerd, kubelet, a bridge and an iptables rule)")
        self._only_node()
        ensure_packages()
        self.bin_dir = self.bin_dir or ensure_node_binaries()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self._network()
        self._start_containerd()
        self.timings["containerd"] = time.monotonic() - t0
        self._load_pause()
        t0 = time.monotonic()
        self._start_kubelet()
        self.timings["kubelet"] = time.monotonic() - t0

    def _only_node(self) -> None:
        """One real node per machine: they would share the bridge, its subnet and containerd's
        root (whose database lock the second containerd would wait on)."""
        for other in Path("/run/priogate-node").glob("*/containerd.sock"):
            if other.parent == self.run_dir:
                continue
            r = run("ctr", f"--address={other}", "version", check=False, timeout=5)
            if r.returncode == 0:
                raise NodeFailed(
                    f"another real node runs on this machine (containerd at {other}); stop it first"
                    " (make down, or end the test that started it)"
                )

    def _network(self) -> None:
        """The bridge, made before kubelet so that the node's IP exists from the start (the CNI
        bridge plugin adopts an existing bridge of its name), and the DNAT for the `kubernetes`
        Service."""
        if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
            run("ip", "link", "add", BRIDGE, "type", "bridge")
        if GATEWAY not in run("ip", "-4", "addr", "show", BRIDGE).stdout:
            run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        run("sysctl", "-q", "-w", f"net.ipv4.conf.{BRIDGE}.route_localnet=1")
        rule = [
            "PREROUTING", "-i", BRIDGE, "-d", f"{KUBERNETES_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
            "-m", "comment", "--comment", f"priogate-node {self.run_dir.name}",
            "-j", "DNAT", "--to-destination", f"{LOOPBACK}:{self.apiserver_port}",
        ]  # fmt: skip
        drop_stale_nat_rules(keep=self.run_dir.name)
        if run("iptables", "-t", "nat", "-C", *rule, check=False).returncode != 0:
            run("iptables", "-t", "nat", "-A", *rule)
        self._nat_rule = rule
        cni_dir = self.dir / "cni"
        cni_dir.mkdir(parents=True, exist_ok=True)
        conflist = cni_conflist(self.run_dir / "ipam")
        (cni_dir / "10-priogate.conflist").write_text(json.dumps(conflist, indent=2) + "\n")

    def _containerd_config(self) -> Path:
        cni_bin = cni_bin_dir()
        assert cni_bin is not None
        runc = shutil.which("runc") or "/usr/sbin/runc"
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        text = f"""# containerd 1.6/1.7 config version 2 (https://github.com/containerd/containerd/blob/release/1.6/docs/cri/config.md)
version = 2
root = "{self.containerd_root}"
state = "{self.run_dir / "containerd-state"}"
# Plugins this node does not use, so their start-up does not fail on this machine.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  level = "warn"
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  # runc cannot raise the OOM score adjustment of a process without CAP_SYS_RESOURCE.
  restrict_oom_score_adj = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{self.dir / "cni"}"
"""
        path = self.dir / "containerd.toml"
        path.write_text(text)
        return path

    def _start_containerd(self) -> Proc:
        config = self._containerd_config()
        version = run("containerd", "--version").stdout.split()[-1]
        progress(f"starting containerd ({version}, socket {self.socket})")
        proc = self.supervisor.start(
            "containerd", ["containerd", f"--config={config}"], self.state_dir / "logs" / "containerd.log"
        )
        wait_until(
            lambda: self.ctr("version", check=False, timeout=5).returncode == 0,
            timeout=60,
            what="containerd answers on its socket",
            proc=proc,
        )
        return proc

    def _load_pause(self) -> None:
        """The sandbox image: the pause binary built beside kubelet, as a one-file image made with
        buildah (registry.k8s.io/pause cannot be pulled everywhere). Pinned by containerd's CRI as
        its sandbox_image, so kubelet's image GC keeps it."""
        assert self.bin_dir
        if PAUSE_IMAGE in self.ctr("images", "check", f"name=={PAUSE_IMAGE}", check=False).stdout:
            return
        archive = self.bin_dir / "pause-image.tar"
        if not archive.is_file():
            container = run("buildah", "from", "scratch").stdout.strip()
            try:
                run("buildah", "copy", container, str(self.bin_dir / "pause"), "/pause")
                run("buildah", "config", "--entrypoint", '["/pause"]', "--user", "65535:65535", container)
                run("buildah", "commit", "--quiet", container, PAUSE_IMAGE)
            finally:
                run("buildah", "rm", container, check=False)
            tmp = archive.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            run("podman", "save", "--quiet", "--format=docker-archive", "-o", str(tmp), PAUSE_IMAGE)
            tmp.replace(archive)
        self.ctr("images", "import", str(archive))

    def load_image(self, image: str) -> float:
        """Copy a podman/buildah image into containerd's k8s.io namespace (what the CRI sees).
        Returns the seconds it took."""
        t0 = time.monotonic()
        archive = self.dir / "image.tar"
        archive.unlink(missing_ok=True)
        run("podman", "save", "--quiet", "--format=docker-archive", "-o", str(archive), image, timeout=600)
        try:
            self.ctr("images", "import", str(archive), timeout=600)
        finally:
            archive.unlink(missing_ok=True)
        return time.monotonic() - t0

    def _kubelet_config(self) -> Path:
        ports = free_ports(2)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # The node's IP, where kube-apiserver asks for logs and exec (InternalIP); the bridge
            # is this machine's own, so nothing outside it reaches kubelet.
            "address": GATEWAY,
            "port": ports[0],
            "readOnlyPort": 0,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": ports[1],
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.pki.ca_crt)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            # containerd 1.x has no RuntimeConfig RPC: kubelet 1.36 then uses this (see the module doc).
            "cgroupDriver": "cgroupfs",
            # cgroups v1 (a hybrid host): kubelet >= 1.35 refuses to start without this.
            "failCgroupV1": False,
            "failSwapOn": False,
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            # No disk-pressure eviction or image GC driven by a shared machine's other users.
            "evictionHard": {"memory.available": "100Mi"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "registerNode": True,
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
        }
        self.healthz_port = ports[1]
        path = self.dir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _start_kubelet(self) -> Proc:
        assert self.bin_dir
        kubeconfig = self.dir / "kubelet.kubeconfig"
        write_kubeconfig(
            kubeconfig,
            f"https://{LOOPBACK}:{self.apiserver_port}",
            self.pki,
            f"system:node:{NODE_NAME}",
            self.pki.node_crt,
            self.pki.node_key,
        )
        config = self._kubelet_config()
        progress(f"starting kubelet as node {NODE_NAME} (pods on {BRIDGE}, {POD_SUBNET})")
        proc = self.supervisor.start(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.run_dir / 'kubelet'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={GATEWAY}",
                "--node-labels=type=real",
                "--v=1",
            ],
            self.state_dir / "logs" / "kubelet.log",
        )
        wait_until(
            lambda: _healthz(self.healthz_port), timeout=90, what="kubelet's /healthz is ok", proc=proc
        )
        return proc

    # ---- stop ----------------------------------------------------------------------------------

    def stop_pods(self, timeout: float = 30) -> None:
        """Kill what containerd still runs for this node (kubelet is stopped by now): tasks, then
        containers. A shim outlives containerd, so without this the pods would keep running."""
        if not self.socket.exists():
            return
        r = self.ctr("tasks", "ls", "-q", check=False, timeout=10)
        for task in r.stdout.split():
            self.ctr("tasks", "kill", "--signal=SIGKILL", task, check=False, timeout=10)
        deadline = time.monotonic() + timeout
        for task in r.stdout.split():
            while time.monotonic() < deadline:
                if self.ctr("tasks", "delete", task, check=False, timeout=10).returncode == 0:
                    break
                time.sleep(0.2)
        for container in self.ctr("containers", "ls", "-q", check=False, timeout=10).stdout.split():
            self.ctr("containers", "delete", container, check=False, timeout=10)

    def cleanup(self) -> None:
        """After containerd and kubelet stopped: unmount what kubelet and containerd mounted under
        run_dir (pod volumes, sandbox /dev/shm), drop the NAT rule, remove run_dir. The bridge
        stays (empty): another run reuses it."""
        mounts = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[1].startswith(str(self.run_dir) + "/")
        ]
        for mount in sorted(mounts, key=len, reverse=True):
            r = run("umount", mount, check=False)
            if r.returncode != 0:
                progress(f"umount {mount}: {r.stderr.strip()}; lazily")
                run("umount", "-l", mount, check=False)
        if self._nat_rule:
            run("iptables", "-t", "nat", "-D", *self._nat_rule, check=False)
            self._nat_rule = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.run_dir)


def _healthz(port: int) -> bool:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/healthz", timeout=2) as r:
        return r.status == 200
