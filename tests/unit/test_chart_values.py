"""Values an install needs beyond the kustomize base: each changes what its documentation says in
what charts/priogate/ renders (replicas, resources, image, probes, mTLS, controller flags, network
policy, scheduling, the values schema)."""

from __future__ import annotations

import argparse
import json
import subprocess

import pytest

from controller.flags import add_arguments as controller_arguments
from tests.unit.chart_render import CHART, NAMESPACE, container, containers, defaults, kustomize, render


def test_replicas_resources_workers_image() -> None:
    objs = render(
        "webhook.replicas=3",
        "controller.replicas=1",
        'webhook.quota.resources={"requests":{"cpu":"1"}}',
        "webhook.priority.workers=4",
        "image.repository=registry.example/priogate",
        "image.tag=1.2.3",
    )
    assert objs["Deployment", "priogate-webhook"]["spec"]["replicas"] == 3
    assert objs["Deployment", "priogate-controller"]["spec"]["replicas"] == 1
    # Helm merges a map given on the command line into the default one.
    resources = container(objs, "priogate-webhook", "quota")["resources"]
    assert resources == {
        "requests": {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "64Mi"},
        "limits": {"memory": "1Gi", "ephemeral-storage": "256Mi"},
    }
    env = {e["name"]: e.get("value") for e in container(objs, "priogate-webhook", "priority")["env"]}
    assert env["PRIOGATE_WORKERS"] == "4"
    images = {c["image"] for o in objs.values() for c in containers(o)}
    assert images == {"registry.example/priogate:1.2.3"}
    digest = "sha256:" + "0" * 64
    images = {c["image"] for o in render(f"image.digest={digest}").values() for c in containers(o)}
    assert images == {f"priogate@{digest}"}


@pytest.mark.parametrize("mtls", [False, True])
def test_probes_use_the_health_ports_with_and_without_mtls(mtls: bool) -> None:
    """kubelet's probes carry no client certificate: /readyz and /healthz go to the plain-HTTP
    health port in both cases, so stale caches still take a pod out of the Service under mTLS."""
    objs = render(*(["mtls.clientCASecret=apiserver-client-ca"] if mtls else []))
    for name in ("priority", "quota"):
        c = container(objs, "priogate-webhook", name)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        health = ports[f"{name}-health"]
        assert f"--health-bind=0.0.0.0:{health}" in c["command"]
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": f"{name}-health"}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": f"{name}-health"}
        assert "tcpSocket" not in c["readinessProbe"] and "tcpSocket" not in c["livenessProbe"]
    policy = objs["NetworkPolicy", "priogate-webhook"]
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert {"priority-health", "quota-health"} <= opened


def test_mtls_mounts_the_client_ca() -> None:
    objs = render("mtls.clientCASecret=apiserver-client-ca")
    spec = objs["Deployment", "priogate-webhook"]["spec"]["template"]["spec"]
    assert {"name": "client-ca", "secret": {"secretName": "apiserver-client-ca"}} in spec["volumes"]
    for name in ("priority", "quota"):
        c = container(objs, "priogate-webhook", name)
        assert "--client-ca-file=/etc/priogate/client-ca/ca.crt" in c["command"]
        assert {"name": "client-ca", "mountPath": "/etc/priogate/client-ca", "readOnly": True} in c[
            "volumeMounts"
        ]


def test_controller_flags_parse_with_the_controllers_own_argparse() -> None:
    objs = render('controller.flags={"gang-preemption":false,"opt-out-mode":"soft","reclaim-seconds":15}')
    command = container(objs, "priogate-controller", "controller")["command"]
    assert command[:4] == ["python", "-m", "controller", "run"]
    p = argparse.ArgumentParser()
    controller_arguments(p)
    args = p.parse_args(command[4:])
    assert (args.gang_preemption, args.opt_out_mode, args.reclaim_seconds) == (False, "soft", 15.0)
    assert args.leader_elect_namespace == NAMESPACE


def test_values_list_every_controller_flag() -> None:
    p = argparse.ArgumentParser(add_help=False)
    controller_arguments(p)
    values = (CHART / "values.yaml").read_text()
    for a in p._actions:
        flag = a.option_strings[0].removeprefix("--")
        if flag not in {
            "kubeconfig",
            "bind",
            "leader-elect-namespace",
            "leader-elect-name",
            "leader-elect-identity",
        }:
            assert f"#   {flag}:" in values


def test_network_policy_sources_and_switch() -> None:
    source = [{"ipBlock": {"cidr": "192.0.2.0/28"}}]
    objs = render(f"networkPolicy.from={json.dumps(source)}")
    rule, health, replicas = objs["NetworkPolicy", "priogate-webhook"]["spec"]["ingress"]
    assert rule["from"] == source
    assert rule["ports"] == kustomize()["NetworkPolicy", "priogate-webhook"]["spec"]["ingress"][0]["ports"]
    # `from` narrows the webhook ports only; the health ports stay open to what scrapes them.
    assert "from" not in health and {p["port"] for p in health["ports"]} == {
        "priority-health",
        "quota-health",
    }
    # The other webhook replicas reach the quota port (ledger relays) whatever `from` says.
    assert replicas == {
        "from": [
            {
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/component": "webhook",
                        "app.kubernetes.io/name": "priogate",
                    }
                }
            }
        ],
        "ports": [{"port": "quota", "protocol": "TCP"}],
    }
    # the controller's and the caBundle Job's policies do not take `from`, and go with the switch
    assert "from" not in objs["NetworkPolicy", "priogate-controller"]["spec"]["ingress"][0]
    assert not {kind for kind, _ in render("networkPolicy.enabled=false")} & {"NetworkPolicy"}


def test_mtls_needs_no_kube_score_exception_for_its_probes() -> None:
    key = "kube-score/ignore"
    default = defaults()["Deployment", "priogate-webhook"]["metadata"]["annotations"][key]
    assert "pod-probes-identical" not in default.split(",")
    objs = render("mtls.clientCASecret=apiserver-client-ca")
    assert objs["Deployment", "priogate-webhook"]["metadata"]["annotations"][key] == default


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_a_pod_disruption_budget_only_with_more_than_one_replica(component: str) -> None:
    key = ("PodDisruptionBudget", f"priogate-{component}")
    assert key not in render(f"{component}.replicas=1"), "minAvailable 1 of 1 replica blocks every drain"
    assert render(f"{component}.replicas=3")[key]["spec"]["minAvailable"] == 1


def test_strategy_and_pod_scheduling_values_reach_every_pod() -> None:
    toleration = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "webhook"}},
        }
    ]
    objs = render(
        'webhook.strategy={"type":"Recreate"}',
        'imagePullSecrets=[{"name":"regcred"}]',
        'nodeSelector={"pool":"system"}',
        f"tolerations={json.dumps(toleration)}",
        f"webhook.topologySpreadConstraints={json.dumps(spread)}",
    )
    assert objs["Deployment", "priogate-webhook"]["spec"]["strategy"] == {"type": "Recreate"}
    assert "strategy" not in objs["Deployment", "priogate-controller"]["spec"]
    pods = {k: o["spec"]["template"]["spec"] for k, o in objs.items() if k[0] in ("Deployment", "Job")}
    assert len(pods) == 5  # both Deployments, the caBundle, certs and cleanup Jobs
    for key, spec in pods.items():
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], key
        assert spec["nodeSelector"] == {"pool": "system"}, key
        assert spec["tolerations"] == toleration, key
    assert pods["Deployment", "priogate-webhook"]["topologySpreadConstraints"] == spread
    assert "topologySpreadConstraints" not in pods["Deployment", "priogate-controller"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("webhook.replicas=abc", "at '/webhook/replicas': got string, want integer"),
        ("replicas=2", "additional properties 'replicas' not allowed"),
        ("webhook.replica=2", "additional properties 'replica' not allowed"),
        ('webhookConfigurations.hooks={"pod-quota":{"failurePolicy":"Maybe"}}', "failurePolicy"),
        ('webhookConfigurations.hooks={"pod-quota":{"timeoutSeconds":31}}', "timeoutSeconds"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
    ],
)
def test_values_schema_refuses_wrong_types_and_unknown_keys(value: str, error: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render(value)
    assert "values don't meet the specifications of the schema" in failed.value.stderr
    assert error in failed.value.stderr, failed.value.stderr


@pytest.mark.parametrize("component", ["webhook", "controller"])
def test_priority_class_name_value_and_its_integer_without_the_plugin(component: str) -> None:
    key = ("Deployment", f"priogate-{component}")
    spec = render(f"{component}.priorityClassName=platform-high")[key]["spec"]["template"]["spec"]
    assert (spec["priorityClassName"], "priority" in spec) == ("platform-high", False)
    objs = render("priorityPlugin=false", f"{component}.priorityClassName=system-node-critical")
    spec = objs[key]["spec"]["template"]["spec"]
    assert (spec["priorityClassName"], spec["priority"]) == ("system-node-critical", 2000001000)
    # Nothing resolves a class in the release namespace without the plugin: only a class whose
    # integer the chart knows will do.
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render("priorityPlugin=false", f"{component}.priorityClassName=platform-high")
    assert f"{component}.priorityClassName must be one of system-cluster-critical" in failed.value.stderr
