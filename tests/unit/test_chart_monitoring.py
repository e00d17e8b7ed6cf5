"""The chart's ServiceMonitor (monitoring.serviceMonitor): rendered only when enabled, with the
PodMonitor's label convention, scraping named ports the selected Services have, over plain HTTP."""

from __future__ import annotations

from tests.unit.test_chart import defaults, render


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
