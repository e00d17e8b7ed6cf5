"""What the real node (localcluster/node.py) needs from this machine: containerd, runc, iptables
and the CNI plugins, kubelet and pause built from the pinned Kubernetes, the pod network's CNI
configuration, and no `kubernetes` Service DNAT left by an earlier node."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from localcluster.binaries import REPO
from localcluster.components import SERVICE_CIDR
from localcluster.procs import ComponentFailed, progress

BRIDGE = "priogate0"
POD_SUBNET = "10.245.0.0/24"  # outside components.POD_CIDR, where kwok's fake pod IPs live
GATEWAY = "10.245.0.1"
NODE_BUILD_SCRIPT = REPO / "hack" / "node" / "build.sh"
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
PACKAGES = {"containerd": "containerd", "ctr": "containerd", "runc": "runc", "iptables": "iptables"}


class NodeFailed(ComponentFailed):
    """A ComponentFailed, so the launcher reports it as one (an error line, no traceback)."""


def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise NodeFailed(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


def cni_bin_dir() -> Path | None:
    for d in CNI_BIN_DIRS:
        if all((Path(d) / p).is_file() for p in ("bridge", "host-local", "loopback")):
            return Path(d)
    return None


def ensure_packages() -> None:
    """containerd, runc, iptables and the CNI plugins; installed with apt-get when missing and root."""
    missing = sorted({pkg for exe, pkg in PACKAGES.items() if shutil.which(exe) is None})
    if cni_bin_dir() is None:
        missing.append("containernetworking-plugins")
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise NodeFailed(
            f"the real node needs {', '.join(missing)}: sudo apt-get install -y {' '.join(missing)}"
        )
    progress(f"installing {' '.join(missing)} (apt-get)")
    run("apt-get", "update", "-qq", timeout=600)
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", *missing]
    run(*env_cmd, timeout=900)


def ensure_node_binaries() -> Path:
    """The directory holding kubelet and pause, built by hack/node/build.sh when needed."""
    result = subprocess.run(["bash", str(NODE_BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise NodeFailed(f"{NODE_BUILD_SCRIPT} failed (exit code {result.returncode}); its output is above")
    return Path(lines[-1])


def cni_conflist(ipam_dir: Path) -> dict[str, Any]:
    """The pod network: the bridge plugin on BRIDGE, addresses from host-local."""
    return {
        "cniVersion": "1.0.0",
        "name": "priogate",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                    # Only the service range goes through the host (the DNAT rule); no default
                    # route, so a pod reaches nothing beyond this machine.
                    "routes": [{"dst": SERVICE_CIDR}],
                    # Allocations live with this node's state, not in /var/lib/cni.
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }


def drop_stale_nat_rules(keep: str) -> None:
    """Delete the `kubernetes` Service DNAT of an earlier node that was never stopped (its process
    killed with the machine): the first matching rule wins, so a stale one sends the pods to an
    API server port nothing listens on. `_only_node` has made sure no other node runs."""
    listing = run("iptables", "-t", "nat", "-S", "PREROUTING").stdout.splitlines()
    for line in listing:
        words = shlex.split(line)
        if words[:2] != ["-A", "PREROUTING"] or "--comment" not in words:
            continue
        comment = words[words.index("--comment") + 1]
        if comment.startswith("priogate-node ") and comment != f"priogate-node {keep}":
            progress(f"deleting a stale DNAT of an earlier node ({comment})")
            run("iptables", "-t", "nat", "-D", *words[1:])
