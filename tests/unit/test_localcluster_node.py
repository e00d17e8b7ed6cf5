"""The real node's configuration files (localcluster/node.py): what keeps pods on this machine,
and what kubelet 1.36 needs to run beside containerd 1.x on a cgroups v1 host."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster import node_host
from localcluster.components import POD_CIDR, SERVICE_CIDR
from localcluster.node import RealNode
from localcluster.node_host import GATEWAY, POD_SUBNET, cni_conflist
from localcluster.pki import KUBERNETES_SERVICE_IP, Pki
from localcluster.procs import Supervisor


def test_pods_get_a_route_to_the_services_only(tmp_path: Path) -> None:
    ipam = cni_conflist(tmp_path / "ipam")["plugins"][0]["ipam"]
    assert ipam["routes"] == [{"dst": SERVICE_CIDR}], "no default route: nothing beyond this machine"
    assert ipam["dataDir"] == str(tmp_path / "ipam")
    assert ipaddress.ip_address(KUBERNETES_SERVICE_IP) in ipaddress.ip_network(SERVICE_CIDR)


def test_the_pod_subnet_is_apart_from_kwoks_fake_pod_ips() -> None:
    subnet = ipaddress.ip_network(POD_SUBNET)
    assert not subnet.overlaps(ipaddress.ip_network(POD_CIDR))
    assert ipaddress.ip_address(GATEWAY) in subnet


def test_kubelet_runs_on_cgroups_v1_with_containerd_1(tmp_path: Path) -> None:
    node = RealNode(tmp_path, Pki(tmp_path / "pki"), 6443, Supervisor())
    node.dir.mkdir(parents=True)
    config = yaml.safe_load(node._kubelet_config().read_text())
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["containerRuntimeEndpoint"] == f"unix://{node.socket}"
    assert config["readOnlyPort"] == 0 and config["authentication"]["anonymous"]["enabled"] is False
    # healthz on loopback; the API (logs, exec) on the bridge, which only this machine reaches
    assert config["healthzBindAddress"] == "127.0.0.1" and config["address"] == GATEWAY


def test_each_state_directory_has_its_own_short_run_directory(tmp_path: Path) -> None:
    a = RealNode(tmp_path / "a", Pki(tmp_path), 1, Supervisor())
    b = RealNode(tmp_path / "b", Pki(tmp_path), 1, Supervisor())
    assert a.run_dir != b.run_dir
    # a unix socket path must stay under 108 bytes
    assert len(str(a.socket)) < 100


def test_an_earlier_nodes_dnat_is_deleted_and_this_nodes_and_others_rules_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listing = "\n".join(
        [
            "-P PREROUTING ACCEPT",
            "-A PREROUTING -d 10.96.0.1/32 -i priogate0 -p tcp -m tcp --dport 443 -m comment --comment"
            ' "priogate-node old1" -j DNAT --to-destination 127.0.0.1:35313',
            "-A PREROUTING -d 10.96.0.1/32 -i priogate0 -p tcp -m tcp --dport 443 -m comment --comment"
            ' "priogate-node mine" -j DNAT --to-destination 127.0.0.1:41707',
            '-A PREROUTING -m comment --comment "someone else" -j ACCEPT',
        ]
    )
    calls: list[tuple[str, ...]] = []

    def fake_run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(list(argv), 0, listing if "-S" in argv else "", "")

    monkeypatch.setattr(node_host, "run", fake_run)
    node_host.drop_stale_nat_rules(keep="mine")
    deletes = [argv for argv in calls if "-D" in argv]
    assert deletes == [
        (
            "iptables", "-t", "nat", "-D", "PREROUTING", "-d", "10.96.0.1/32", "-i", "priogate0", "-p", "tcp",
            "-m", "tcp", "--dport", "443", "-m", "comment", "--comment", "priogate-node old1",
            "-j", "DNAT", "--to-destination", "127.0.0.1:35313",
        )
    ]  # fmt: skip
