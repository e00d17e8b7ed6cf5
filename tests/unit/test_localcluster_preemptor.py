"""localcluster's --preemptor: kube-scheduler's command line and config file in each mode, and
the controller's flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from localcluster import Options
from localcluster.__main__ import _options
from localcluster.components import SCHEDULER_CONFIG, Ports, kube_scheduler, scheduler_config

PORTS = Ports(*range(7))
KUBECONFIG = Path("/state/kubeconfig")


def test_the_shipped_profile_keeps_default_preemption_with_priogates_extender():
    config = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == "default-scheduler"
    assert "plugins" not in profile  # DefaultPreemption stays on
    (args,) = profile["pluginConfig"]
    assert args["name"] == "DefaultPreemption"
    assert args["args"] == {"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 100}
    (extender,) = config["extenders"]
    assert extender["preemptVerb"] == "preempt"
    assert not {"filterVerb", "prioritizeVerb", "bindVerb"} & set(extender)
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False  # fail closed: the opt-out label is a guarantee
    assert extender["enableHTTPS"] is True and extender["urlPrefix"].startswith("https://")


def test_kube_scheduler_flags_in_each_mode():
    default = kube_scheduler(Path("/bin"), KUBECONFIG, PORTS)
    assert f"--kubeconfig={KUBECONFIG}" in default and "--leader-elect=false" in default
    assert not any(a.startswith("--config") for a in default)
    config = Path("/state/kube-scheduler-config.yaml")
    priogate = kube_scheduler(Path("/bin"), KUBECONFIG, PORTS, config)
    # With --config, the deprecated --kubeconfig is ignored: it and leader election move into
    # the file; serving and delegated auth stay flags.
    assert f"--config={config}" in priogate
    assert not any(a.startswith(("--kubeconfig", "--leader-elect")) for a in priogate)
    assert f"--authentication-kubeconfig={KUBECONFIG}" in priogate
    assert f"--secure-port={PORTS.scheduler}" in priogate


def test_the_written_config_is_the_shipped_profile_plus_the_connection_and_the_local_extender():
    config = scheduler_config(KUBECONFIG, "https://127.0.0.1:9/scheduler", Path("/state/pki/ca.crt"))
    assert config["clientConnection"] == {"kubeconfig": str(KUBECONFIG)}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["profiles"] == yaml.safe_load(SCHEDULER_CONFIG.read_text())["profiles"]
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "https://127.0.0.1:9/scheduler"
    assert extender["tlsConfig"] == {"caFile": "/state/pki/ca.crt"}


def test_the_controller_preempts_for_pods_only_in_the_priogate_mode():
    assert Options().preemptor == "kube-scheduler"
    assert Options().preemptor_flags() == ()
    assert Options(preemptor="priogate").preemptor_flags() == ("--pod-preemption",)
    with pytest.raises(ValueError):
        Options(preemptor="volcano")


def _args(**changes: object) -> argparse.Namespace:
    flags = dict(
        state_dir=Path("/s"),
        nodes=1,
        node_cpu="8",
        node_memory="32Gi",
        node_pods=110,
        keep_priority_plugin=False,
        preemption_preview=False,
        no_webhook=False,
        workers=1,
        no_mtls=False,
        no_controller=False,
        preemptor="kube-scheduler",
        unschedulable_flush=None,
        real_node=False,
    )
    return argparse.Namespace(**(flags | changes))


def test_the_command_line_flag_reaches_the_options():
    assert _options(_args(preemptor="priogate")).preemptor == "priogate"


def test_the_unschedulable_pool_flush_is_kube_schedulers_own_unless_asked():
    assert not any("unschedulable" in a for a in kube_scheduler(Path("/bin"), KUBECONFIG, PORTS))
    config = Path("/state/kube-scheduler-config.yaml")
    for with_config in (None, config):
        argv = kube_scheduler(Path("/bin"), KUBECONFIG, PORTS, with_config, 30)
        assert "--pod-max-in-unschedulable-pods-duration=30s" in argv
    assert _options(_args(unschedulable_flush=30.0)).unschedulable_flush_s == 30.0
    assert _options(_args()).unschedulable_flush_s is None
