"""The real node's configuration files (localcluster/node.py): what keeps pods on this machine,
and what kubelet 1.36 needs to run beside containerd 1.x on a cgroups v1 host."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import yaml

from localcluster.components import POD_CIDR, SERVICE_CIDR
from localcluster.node import GATEWAY, POD_SUBNET, RealNode, cni_conflist
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
    assert config["healthzBindAddress"] == "127.0.0.1" and config["address"] == "127.0.0.1"


def test_each_state_directory_has_its_own_short_run_directory(tmp_path: Path) -> None:
    a = RealNode(tmp_path / "a", Pki(tmp_path), 1, Supervisor())
    b = RealNode(tmp_path / "b", Pki(tmp_path), 1, Supervisor())
    assert a.run_dir != b.run_dir
    # a unix socket path must stay under 108 bytes
    assert len(str(a.socket)) < 100
