"""charts/priogate/values.yaml and its values.schema.json (hack/chart.py): the defaults are
manifests/'s, each value with the comment charts/priogate/README.md is made from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from controller.flags import add_arguments as controller_arguments
from hack.chart_templates import CONFIG_NAME, HEADER, container, flow


def kustomize_image(manifests: Path) -> tuple[str, str, str, str]:
    k = yaml.safe_load((manifests / "kustomization.yaml").read_text())
    (image,) = k["images"]
    return image["name"], f"{image['newName']}:{image['newTag']}", image["newName"], str(image["newTag"])


# Every container of manifests/ pulls so (hack/chart.py's render_object checks that none is left
# behind).
PULL_POLICY = "IfNotPresent"


def controller_flags_comment() -> str:
    """The controller's flags, from its argparse definition, for values.yaml."""
    p = argparse.ArgumentParser(add_help=False)
    controller_arguments(p)
    lines = []
    skip = {"kubeconfig", "bind", "leader-elect-namespace", "leader-elect-name", "leader-elect-identity"}
    for a in p._actions:
        flag = a.option_strings[0].removeprefix("--")
        if flag in skip:
            continue
        if isinstance(a, argparse.BooleanOptionalAction):
            kind = f"true/false (default {str(a.default).lower()})"
        else:
            kind = repr(a.default)
        if a.choices:
            kind = "|".join(a.choices)
        help_text = " ".join((a.help or "").split())
        lines.append(f"  #   {flag}: {kind}" + (f"  # {help_text}" if help_text else ""))
    return "\n".join(lines)


def values_yaml(objs: list[dict], manifests: Path) -> str:
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    web = by["Deployment", "priogate-webhook"]
    ctl = by["Deployment", "priogate-controller"]
    job = by["Job", "priogate-cabundle"]
    wspec = web["spec"]["template"]["spec"]

    def workers(c: dict) -> int:
        return int(next(e["value"] for e in c["env"] if e["name"] == "PRIOGATE_WORKERS"))

    _, _, repo, tag = kustomize_image(manifests)
    pri, quo = container(wspec, "priority"), container(wspec, "quota")
    header = HEADER.format(source="manifests/ and controller/flags.py")
    return f"""{header}# The defaults are manifests/'s values: with them the chart renders what
# `kubectl kustomize manifests/` prints, apart from the differences hack/chart.py DIFFERENCES lists.
# charts/priogate/README.md is generated from this file's comments (hack/chart_readme.py).

image:
  # The image of every container (webhook, controller, Jobs, the test pod).
  repository: {repo}
  # The tag; appVersion in Chart.yaml is the version it holds.
  tag: {flow(tag)}
  # sha256:... pins the image by digest; it then wins over the tag.
  digest: ""
  # IfNotPresent: the image is pinned, and a webhook must restart while the registry is down.
  pullPolicy: {PULL_POLICY}

# Secrets for pulling the image from a private registry, e.g. [{{name: regcred}}]; every pod.
imagePullSecrets: []
# Every pod's nodeSelector (the Deployments' and the Jobs').
nodeSelector: {{}}
# Every pod's tolerations, e.g. [{{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}}].
tolerations: []

# Keep (true) or replace (false) kube-apiserver's built-in Priority admission plugin
# (docs/modes.md). true: the priority hooks exempt kube-system and the release namespace and fail
# open (Ignore). false: they fail closed (Fail) and exempt only the release namespace, so that
# priogate's own pods can start while no webhook answers; those pods carry their priority
# integer themselves, and nothing else should run in that namespace (no priority is resolved
# there). Run kube-apiserver with --disable-admission-plugins=Priority. The quota hooks are the
# same in both modes.
priorityPlugin: true

# The preemption preview (docs/priorityclass-policy.md): a dry-run pod or PodGroup create
# (`kubectl create --dry-run=server`) that would need preemption gets a warning saying how many
# pods it would preempt, where, and at what highest priority. true registers its hook (dry runs
# only; failurePolicy Ignore) and runs its server in the quota container (`--serve=quota,preview`),
# which then also watches every pod and node. Off by default: kube-apiserver converts every pod
# create for the hook's matchCondition, a cost measured in docs/benchmarks.md.
preemptionPreview: false

webhookConfigurations:
  # false: register no hooks, no in-process policies, no certs or caBundle Job (you provide the serving
  # Secret <namespace>/priogate-webhook-tls, the configurations and, with them, the policies and
  # their table: the hooks skip what the policies resolve; docs/modes.md).
  create: true
  # The MutatingWebhookConfiguration's and ValidatingWebhookConfiguration's name.
  name: {CONFIG_NAME}
  # Per hook, by its name without .priogate.io (pod-priority, priorityclasses, podgroup-quota,
  # ...): failurePolicy (Fail|Ignore) and timeoutSeconds (1 to 30) over the mode's, e.g.
  #   podgroup-quota: {{failurePolicy: Ignore, timeoutSeconds: 10}}
  # Ignore on a quota hook admits what it would refuse while priogate is down (docs/modes.md).
  hooks: {{}}
  # More namespaces every hook and in-process policy leaves alone, next to the mode's own
  # exemptions (kube-system and the release namespace).
  excludeNamespaces: []

# The webhook Deployment: two servers (priority, quota) in each pod.
webhook:
  # With 1 replica no PodDisruptionBudget is rendered (minAvailable 1 would block every drain).
  replicas: {web["spec"]["replicas"]}
  # The Deployment's update strategy; {{type: Recreate}} stops the old pods before the new start.
  strategy: {{}}
  # The webhook pods' topologySpreadConstraints (select app.kubernetes.io/component: webhook).
  topologySpreadConstraints: []
  # The webhook pods' PriorityClass: it must run when everything else is short of room. With
  # priorityPlugin=false only system-cluster-critical or system-node-critical (their integer is
  # written into the pod, as nothing resolves a class in the release namespace).
  priorityClassName: {wspec["priorityClassName"]}
  priority:
    # Worker processes of the priority server (PriorityClass rules; pure CPU).
    workers: {workers(pri)}
    # The priority container's resources (no CPU limit: throttling adds to every admission).
    resources: {flow(pri["resources"])}
  quota:
    # Worker processes of the quota server (PodGroup quota, ledger writes). One: its threads
    # batch a namespace's admissions into one ledger write, where processes would race for it
    # (docs/serving.md). Scale the quota server with replicas.
    workers: {workers(quo)}
    # The quota container's resources; its PodGroup cache grows with the cluster.
    resources: {flow(quo["resources"])}

# Require a client certificate from kube-apiserver (docs/hardening.md): the name of a Secret in
# the release namespace holding the CA that signed it, on the webhook ports only. The probes and
# Prometheus use the plain-HTTP health ports (priority-health 8081, quota-health 8082), which
# need none.
mtls:
  clientCASecret: ""
  clientCAKey: ca.crt

# manifests/networkpolicy.yaml: of priogate's pods' ports only the webhook's two, its two health
# ports and the controller's metrics are open. `from` narrows the webhook ports' sources to
# where kube-apiserver's connections come from (docs/hardening.md), e.g.
#   from: [{{ipBlock: {{cidr: 192.0.2.0/28}}}}]
networkPolicy:
  enabled: true
  from: []

# The gang-preemption controller (docs/controller.md); one replica leads through a Lease.
controller:
  # With 1 replica no PodDisruptionBudget is rendered.
  replicas: {ctl["spec"]["replicas"]}
  # The Deployment's update strategy, as webhook.strategy.
  strategy: {{}}
  # The controller pods' topologySpreadConstraints (app.kubernetes.io/component: controller).
  topologySpreadConstraints: []
  # The controller pods' PriorityClass, as webhook.priorityClassName.
  priorityClassName: {ctl["spec"]["template"]["spec"]["priorityClassName"]}
  # The controller container's resources; its caches grow with the cluster.
  resources: {flow(container(ctl["spec"]["template"]["spec"], "controller")["resources"])}
  # Flags of `python -m controller run` (controller/flags.py), name without the dashes: value.
  # true/false become --name/--no-name. Defaults:
{controller_flags_comment()}
  flags: {{}}

cabundleJob:
  # The resources of the certs and caBundle Jobs' container.
  resources: {flow(container(job["spec"]["template"]["spec"], "cabundle")["resources"])}

monitoring:
  # A PrometheusRule (prometheus-operator's CRD) with priogate's alerts.
  prometheusRule:
    enabled: false
    # Extra labels, e.g. the one your Prometheus' ruleSelector matches.
    labels: {{}}
    # Alert when the serving certificate expires in less than this many days.
    certificateExpiryDays: 30
    # Webhook answers that are errors, as a share of all answers over 5 minutes.
    errorRatio: 0.01
    # Denials as a share of all answers over 15 minutes (a sudden rise is worth a look).
    denialRatio: 0.5
    # p99 admission latency, seconds (the hooks' timeoutSeconds is 5 or less).
    latencyP99Seconds: 1
    # Gang preemptions per minute.
    preemptionsPerMinute: 5
    # Ledger write conflicts per second, sustained.
    ledgerConflictsPerSecond: 1
    # A ledger's size as a share of a ConfigMap's 1 MiB.
    ledgerFillRatio: 0.8
  # A PodMonitor (prometheus-operator's CRD) scraping the controller's and both webhook servers'
  # /metrics (plain HTTP: the controller's metrics port, the webhook's health ports).
  podMonitor:
    enabled: false
    # Extra labels, e.g. the one your Prometheus' podMonitorSelector matches.
    labels: {{}}
    # How often to scrape.
    interval: 30s
  # A ServiceMonitor (prometheus-operator's CRD) scraping the same /metrics through the webhook's
  # and the controller's Services (their named ports priority-health, quota-health, metrics);
  # enable it or the PodMonitor, not both (each would scrape every pod).
  serviceMonitor:
    enabled: false
    # Extra labels, e.g. the one your Prometheus' serviceMonitorSelector matches.
    labels: {{}}
    # How often to scrape.
    interval: 30s
  # A ConfigMap holding the Grafana dashboard, labelled for Grafana's dashboard sidecar.
  grafanaDashboard:
    enabled: false
    # The labels Grafana's dashboard sidecar looks for.
    labels: {{grafana_dashboard: "1"}}
"""


# values.schema.json (https://helm.sh/docs/topics/charts/#schema-files): Helm validates the
# values of every install, upgrade, lint and template against it. Inferred from the defaults,
# with these refinements; a map whose keys are free is open, every other map closed, so a typo
# (an unknown key) fails instead of being ignored.
FREE_FORM = ("resources", "labels", "flags", "nodeSelector", "strategy")
HOOK_OVERRIDE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "failurePolicy": {"enum": ["Fail", "Ignore"]},
        # admissionregistration.k8s.io/v1: 1 to 30 seconds.
        "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
    },
}
SCHEMA_OVERRIDES: dict[str, dict[str, Any]] = {
    "image.tag": {"type": ["string", "number"]},
    "image.digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
    "image.pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
    "webhook.replicas": {"type": "integer", "minimum": 1},
    "controller.replicas": {"type": "integer", "minimum": 1},
    "webhook.priority.workers": {"type": "integer", "minimum": 1},
    "webhook.quota.workers": {"type": "integer", "minimum": 1},
    "webhookConfigurations.hooks": {"type": "object", "additionalProperties": HOOK_OVERRIDE},
    "webhookConfigurations.excludeNamespaces": {"type": "array", "items": {"type": "string"}},
    "networkPolicy.from": {"type": "array", "items": {"type": "object"}},
    "monitoring.prometheusRule.certificateExpiryDays": {"type": "number", "minimum": 0},
}


def schema(values: Any, path: str = "") -> dict[str, Any]:
    if path in SCHEMA_OVERRIDES:
        return SCHEMA_OVERRIDES[path]
    key = path.rsplit(".", 1)[-1]
    if isinstance(values, dict):
        if key in FREE_FORM:
            return {"type": "object"}
        props = {k: schema(v, f"{path}.{k}".lstrip(".")) for k, v in values.items()}
        return {"type": "object", "additionalProperties": False, "properties": props}
    if isinstance(values, bool):
        return {"type": "boolean"}
    if isinstance(values, int | float):
        return {"type": "number"}
    if isinstance(values, str):
        return {"type": "string"}
    if isinstance(values, list):
        return {"type": "array"}
    raise TypeError(f"{path}: a default of type {type(values).__name__}")


def values_schema(values_text: str) -> str:
    doc = {"$schema": "https://json-schema.org/draft-07/schema#", **schema(yaml.safe_load(values_text))}
    # Helm adds `global` to every chart's values (subcharts share it).
    doc["properties"]["global"] = {"type": "object"}
    return json.dumps(doc, indent=2) + "\n"
