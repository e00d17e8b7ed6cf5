"""The chart's monitoring: the PrometheusRule, the Grafana dashboard, the PodMonitor and the
ServiceMonitor (monitoring.*) render only when enabled, the monitors scraping, over plain HTTP,
named ports the selected pods and Services have; the alerts and the dashboard name only metrics
the code exports."""

from __future__ import annotations

import json
import re

from prometheus_client import Metric
from prometheus_client.metrics import MetricWrapperBase

from controller.serving import Metrics
from tests.unit.chart_render import CHART, defaults, render
from webhook import metrics as webhook_metrics


def test_monitoring_is_off_by_default_and_renders_when_asked() -> None:
    assert not {k for k in defaults() if k[0] == "PrometheusRule" or k[1] == "priogate-dashboard"}
    objs = render("monitoring.prometheusRule.enabled=true", "monitoring.grafanaDashboard.enabled=true")
    rules = objs["PrometheusRule", "priogate"]["spec"]["groups"]
    alerts = {r["alert"] for g in rules for r in g["rules"]}
    assert len(alerts) == 9
    expiry = next(r for g in rules for r in g["rules"] if r["alert"] == "PriogateCertificateExpiringSoon")
    assert "< 30 * 86400" in expiry["expr"]
    filling = next(r for g in rules for r in g["rules"] if r["alert"] == "PriogateLedgerFilling")
    assert "> 0.8 * 1048576" in filling["expr"]
    dashboard = json.loads(objs["ConfigMap", "priogate-dashboard"]["data"]["priogate.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "priogate.json").read_text())
    assert objs["ConfigMap", "priogate-dashboard"]["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_pod_monitor_scrapes_ports_the_pods_have() -> None:
    assert not {k for k in defaults() if k[0] == "PodMonitor"}
    objs = render("monitoring.podMonitor.enabled=true", 'monitoring.podMonitor.labels={"release":"kp"}')
    monitor = objs["PodMonitor", "priogate"]
    assert monitor["metadata"]["labels"]["release"] == "kp"
    ports = {
        p["name"]
        for k, o in objs.items()
        if k[0] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    }
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert ports == {"metrics", "priority", "quota", "priority-health", "quota-health", "extender"}
    # Plain HTTP only: the webhook's metrics come from its health ports, never the (m)TLS ones.
    assert {e["port"] for e in endpoints} == {"metrics", "priority-health", "quota-health"}
    for e in endpoints:
        assert e["path"] == "/metrics" and "scheme" not in e and "tlsConfig" not in e


def test_service_monitor_only_when_enabled() -> None:
    assert not {k for k in defaults() if k[0] == "ServiceMonitor" or k[1] == "priogate-controller-metrics"}


def test_service_monitor_scrapes_ports_its_services_have() -> None:
    objs = render(
        "monitoring.serviceMonitor.enabled=true",
        'monitoring.serviceMonitor.labels={"release":"kp"}',
        "monitoring.serviceMonitor.interval=15s",
        namespace="gate",
    )
    monitor = objs["ServiceMonitor", "priogate"]
    assert monitor["metadata"]["namespace"] == "gate"
    assert monitor["metadata"]["labels"]["release"] == "kp"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/name"] == "priogate"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gate"]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        o
        for k, o in objs.items()
        if k[0] == "Service" and selector.items() <= o["metadata"].get("labels", {}).items()
    ]
    # priogate-controller is the preempt extender's (no metrics port: nothing scraped there).
    assert {s["metadata"]["name"] for s in services} == {
        "priogate-webhook",
        "priogate-controller-metrics",
        "priogate-controller",
    }
    named = {p["name"] for s in services for p in s["spec"]["ports"]}
    endpoints = monitor["spec"]["endpoints"]
    assert {e["port"] for e in endpoints} == {"metrics", "priority-health", "quota-health"} <= named
    for e in endpoints:
        assert (e["path"], e["interval"]) == ("/metrics", "15s") and "scheme" not in e
    # The controller's Service selects the controller's pods, whose port it names.
    metrics = objs["Service", "priogate-controller-metrics"]
    pod = objs["Deployment", "priogate-controller"]["spec"]["template"]
    assert metrics["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (c,) = pod["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 8080} in c["ports"]


def test_both_monitors_may_be_rendered() -> None:
    objs = render("monitoring.serviceMonitor.enabled=true", "monitoring.podMonitor.enabled=true")
    assert ("ServiceMonitor", "priogate") in objs and ("PodMonitor", "priogate") in objs


# --- every metric the alerts and the dashboard name is exported by the code ---------------------

SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _names(families: list[Metric]) -> set[str]:
    return {f.name + s for f in families for s in SUFFIXES[f.type]}


def exported_metric_names() -> set[str]:
    # webhook/metrics.py's module-level metrics (describe() gives each family's name and type,
    # the counter's without _total) and controller/serving.py's registry.
    webhook = [
        f for v in vars(webhook_metrics).values() if isinstance(v, MetricWrapperBase) for f in v.describe()
    ]
    return _names(webhook) | _names(list(Metrics().registry.collect()))


def named_metrics(text: str) -> set[str]:
    return set(re.findall(r"\bpriogate_[a-z_]+\b", text))


def test_metric_names_in_alerts_and_dashboard_exist_in_the_code() -> None:
    exported = exported_metric_names()
    assert "priogate_controller_preemptions_total" in exported  # the counter's exposed name
    rule_text = (CHART / "templates" / "prometheusrule.yaml").read_text()
    dash_text = (CHART / "dashboards" / "priogate.json").read_text()
    for source, text in (("prometheusrule.yaml", rule_text), ("priogate.json", dash_text)):
        names = named_metrics(text)
        assert names, source
        assert names <= exported, f"{source} names metrics the code does not export: {names - exported}"
    # The alerts the issue asks for, each on its metric.
    for metric in (
        "priogate_tls_certificate_expiry_timestamp_seconds",
        "priogate_webhook_requests_total",
        "priogate_webhook_latency_seconds_bucket",
        "priogate_ledger_conflicts_total",
        "priogate_controller_leader",
        "priogate_controller_preemptions_total",
        "priogate_cache_stale",
        "priogate_ledger_bytes",
    ):
        assert metric in named_metrics(rule_text)


def test_uninstall_cleanup_is_a_post_delete_job_with_minimal_rights() -> None:
    """`helm uninstall` leaves what priogate's programs made in the release namespace; a
    post-delete Job removes it (certs/uninstall.py), with rights for exactly that."""
    objs = render(namespace="gate")
    job = objs["Job", "priogate-cleanup"]
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Job"):
        annotations = objs[kind, "priogate-cleanup"]["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    rules = objs["Role", "priogate-cleanup"]["rules"]
    verbs = {(r["resources"][0], tuple(r.get("resourceNames", ()))): set(r["verbs"]) for r in rules}
    assert verbs == {
        ("pods", ()): {"list"},
        ("secrets", ("priogate-webhook-tls",)): {"delete"},
        ("configmaps", ()): {"list", "delete"},
        ("leases", ("priogate-controller",)): {"delete"},
    }
    assert "ClusterRole" not in {k[0] for k in objs if k[1] == "priogate-cleanup"}
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "priogate-cleanup"
    (c,) = spec["containers"]
    assert c["command"] == ["python", "-m", "certs", "uninstall", "--namespace=gate"]
    # With webhookConfigurations.create=false the serving Secret is the admin's: it stays.
    kept = render("webhookConfigurations.create=false")["Job", "priogate-cleanup"]
    assert kept["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "--secret="
