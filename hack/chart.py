"""Generate charts/priogate/ from the kustomize base, so that the chart and manifests/ cannot drift
(run by `make chart`; `--check` fails when the files on disk are not what it would write).

The objects come from `kubectl kustomize manifests/` (namespace and image already applied) and,
for the webhook configurations, from webhook.configuration in both modes. Each object is dumped
as YAML and then the few value-driven places are swapped for Helm template expressions:

* `priogate-system` -> `{{ .Release.Namespace }}` everywhere (metadata, RBAC subjects, flags,
  the webhook Service reference, the namespaces the hooks exempt);
* the image -> `image.repository`/`image.tag`/`image.digest`;
* replicas, resources, worker counts, the controller's flags, the NetworkPolicy's sources,
  client-certificate mTLS, the mode (priorityPlugin) and the webhook configurations' name.

The swap works on the parsed object: a value to template is replaced by a marker string (or a
marker key is added), the object is dumped, and each marker is turned into template text. With
every value at its default the chart renders the objects `kubectl kustomize manifests/` prints,
apart from the differences DIFFERENCES lists (tests/unit/test_chart.py checks it object by object).

Helm's own files (Chart.yaml, _helpers.tpl, NOTES.txt, the monitoring templates and
dashboards/) are written by hand and left alone here.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.flags import add_arguments as controller_arguments  # noqa: E402
from hack.chart_readme import readme  # noqa: E402
from hack.chart_templates import (  # noqa: E402
    CERTS,
    CLEANUP,
    CONFIG_NAME,
    SPECIAL,
    Markers,
    certs_hook_objects,
    cleanup_hook_objects,
    container,
    dump,
    extra_excluded_namespaces,
    flow,
    hook_overrides,
    only_with_preview,
    standard_labels,
)
from priogate import __version__  # noqa: E402
from webhook.configuration import IN_CLUSTER_SERVICE, policy_objects, webhook_configurations  # noqa: E402
from webhook.policy import WebhookPolicy  # noqa: E402

CHART = ROOT / "charts" / "priogate"
MANIFESTS = ROOT / "manifests"
NAMESPACE = "priogate-system"

# What the chart renders differently from `kubectl kustomize manifests/` with default values,
# and why. tests/unit/test_chart.py allows these and nothing else.
DIFFERENCES = {
    "Namespace priogate-system": "not rendered: `helm install -n priogate-system --create-namespace` "
    "creates it, "
    "and Helm refuses to own the namespace it installs into",
    "CustomResourceDefinition": "in crds/, Helm's place for CRDs (installed before the templates, never "
    "deleted by `helm uninstall`; https://helm.sh/docs/chart_best_practices/custom_resource_definitions/)",
    "Job priogate-cabundle": "a post-install/post-upgrade hook (annotations helm.sh/hook*): it injects the "
    "caBundle into configurations that must exist first, and a Job's pod template is immutable, so each "
    "upgrade replaces it rather than patching it",
    f"ServiceAccount, Role, RoleBinding, Job {CERTS}": "only in the chart: pre-install/pre-upgrade hooks "
    "that create the serving Secret before the webhook's init container waits for it (`helm install "
    "--wait` runs post-install hooks only once the webhook is ready; chart_templates.certs_hook_objects). "
    "`kubectl apply -k` applies every object at once, so the base's one Job does both",
    f"ServiceAccount, Role, RoleBinding, Job {CLEANUP}": "only in the chart: post-delete hooks that "
    "remove what priogate's programs made in the release namespace (the serving Secret, the "
    "ledgers, the controller's Lease), which `helm uninstall` would leave (certs/uninstall.py). "
    "`kubectl delete -k` deletes the namespace, and them with it",
    "Pod <release>-test-webhook-ready": "only in the chart: `helm test` (templates/tests/)",
    "labels": "every object carries Helm's recommended labels (app.kubernetes.io/name, instance, "
    "version, managed-by, helm.sh/chart; https://helm.sh/docs/chart_best_practices/labels/); selectors "
    "keep the base's",
    "PodDisruptionBudget": "rendered only with more than 1 replica: minAvailable 1 of 1 blocks every drain",
    "MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy, "
    "ValidatingAdmissionPolicyBinding": "no metadata.namespace: they are "
    "cluster-scoped, and kustomize versions that do not know the kinds set the base's namespace on "
    "them (kube-apiserver ignores it on a cluster-scoped object)",
}
# The objects only the chart has (DIFFERENCES).
CHART_ONLY = {(kind, name) for kind in ("ServiceAccount", "Role", "RoleBinding", "Job") for name in (CERTS, CLEANUP)}
# templates/tests/, named after the release (`helm template priogate ...` in the tests).
CHART_ONLY |= {("Pod", "priogate-test-webhook-ready")}
# Cluster-scoped kinds kustomize may not know (DIFFERENCES).
CLUSTER_SCOPED_POLICY_KINDS = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def kustomize(manifests: Path = MANIFESTS) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(manifests)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kustomize_image(manifests: Path = MANIFESTS) -> tuple[str, str, str, str]:
    k = yaml.safe_load((manifests / "kustomization.yaml").read_text())
    (image,) = k["images"]
    return image["name"], f"{image['newName']}:{image['newTag']}", image["newName"], str(image["newTag"])


# Every container of manifests/ pulls so (render_object checks that none is left behind).
PULL_POLICY = "IfNotPresent"


def render_object(obj: dict, image_ref: str) -> tuple[str, str | None]:
    obj = copy.deepcopy(obj)
    mk = Markers()
    fn, cond = SPECIAL.get((obj["kind"], obj["metadata"]["name"]), (None, None))
    if fn:
        fn(obj, mk)
    standard_labels(obj, mk)
    text = mk.apply(dump(obj))
    text = text.replace(f"image: {image_ref}", 'image: {{ include "priogate.image" . }}')
    text = text.replace(f"imagePullPolicy: {PULL_POLICY}", "imagePullPolicy: {{ .Values.image.pullPolicy }}")
    assert image_ref not in text, (
        f"{obj['kind']}: the image is referenced in a way the generator does not know"
    )
    assert "imagePullPolicy: " not in text.replace("imagePullPolicy: {{", ""), (
        f"{obj['kind']}: a pull policy other than {PULL_POLICY}; give the chart a value for it"
    )
    return text.replace(NAMESPACE, "{{ .Release.Namespace }}"), cond


def webhook_configuration_template() -> str:
    """Both modes (docs/modes.md, webhook.policy): the priority hooks' exemptions and failurePolicy
    differ; the Service reference and the quota hooks do not."""

    def mode(priority_plugin: bool) -> str:
        mk = Markers()
        policy = WebhookPolicy.in_cluster(priority_plugin, NAMESPACE, preemption_preview=True)
        configs = webhook_configurations(None, b"", policy=policy, service=IN_CLUSTER_SERVICE)
        for c in configs:
            c["metadata"]["name"] = mk.value("{{ .Values.webhookConfigurations.name }}")
            hook_overrides(c, mk)
        # The in-process policies and their table (webhook/priority_policy.py).
        configs += policy_objects(policy, NAMESPACE)
        for c in configs:
            extra_excluded_namespaces(c, mk)
            standard_labels(c, mk)
            only_with_preview(c, mk)
        text = "---\n".join(mk.apply(dump(c)) for c in configs)
        return text.replace(NAMESPACE, "{{ .Release.Namespace }}")

    return (
        "{{- if .Values.webhookConfigurations.create }}\n"
        "{{- if .Values.priorityPlugin }}\n"
        + mode(True)
        + "{{- else }}\n"
        + mode(False)
        + "{{- end }}\n{{- end }}\n"
    )


HEADER = "# Generated by hack/chart.py (`make chart`) from {source}; do not edit by hand.\n"


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


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


def generate(manifests: Path = MANIFESTS, chart: Path = CHART) -> dict[Path, str]:
    """The generated files of `chart` (path -> text) from the kustomize base `manifests`."""
    objs = kustomize(manifests)
    _, image_ref, _, _ = kustomize_image(manifests)
    values = values_yaml(objs, manifests)
    files: dict[Path, str] = {
        chart / "values.yaml": values,
        chart / "values.schema.json": values_schema(values),
        chart / "README.md": readme(values),
    }
    gen = chart / "templates" / "generated"
    # Rendered per mode with the webhook configurations, below.
    policies = {
        (o["kind"], o["metadata"]["name"])
        for plugin in (True, False)
        for o in policy_objects(WebhookPolicy.in_cluster(plugin, NAMESPACE), NAMESPACE)
    }
    for obj in objs + certs_hook_objects(objs) + cleanup_hook_objects(objs):
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "Namespace" or kind.endswith("WebhookConfiguration") or (kind, name) in policies:
            continue  # Helm's --create-namespace; the webhook configurations come from the registry
        if kind == "CustomResourceDefinition":
            files[chart / "crds" / f"{name}.yaml"] = HEADER.format(source="manifests/crds/") + dump(obj)
            continue
        text, cond = render_object(obj, image_ref)
        if cond:
            text = f"{{{{- if {cond} }}}}\n{text}{{{{- end }}}}\n"
        files[gen / file_name(obj)] = HEADER.format(source="manifests/ (kubectl kustomize)") + text
    files[gen / "webhookconfigurations.yaml"] = (
        HEADER.format(source="webhook/registry.py and webhook/policy.py") + webhook_configuration_template()
    )
    return files


def stale_files(files: dict[Path, str], chart: Path = CHART) -> list[Path]:
    """Generated templates of objects manifests/ no longer has."""
    gen = chart / "templates" / "generated"
    return [f for f in gen.glob("*.yaml") if f not in files] if gen.exists() else []


def write(files: dict[Path, str], chart: Path = CHART) -> None:
    for f in stale_files(files, chart):
        f.unlink()
    for f, t in files.items():
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(t)


def version_mismatches(manifests: Path = MANIFESTS, chart: Path = CHART) -> list[str]:
    """Where the chart or the base names another version than priogate.__version__, the one
    place it lives (Chart.yaml is written by hand; values.yaml's tag comes from kustomization)."""
    wrong = []
    app_version = str(yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"])
    if app_version != __version__:
        wrong.append(f"{chart.name}/Chart.yaml appVersion {app_version}")
    _, _, _, tag = kustomize_image(manifests)
    if tag != __version__:
        wrong.append(f"manifests/kustomization.yaml newTag {tag}")
    return wrong


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="fail if the chart is not what would be written")
    args = p.parse_args()
    versions = version_mismatches()
    if versions:
        print(f"not priogate.__version__ {__version__}: " + ", ".join(versions), file=sys.stderr)
        return 1
    files = generate()
    stale = stale_files(files)
    if args.check:
        wrong = [str(f.relative_to(ROOT)) for f, t in files.items() if not f.exists() or f.read_text() != t]
        wrong += [str(f.relative_to(ROOT)) for f in stale]
        if wrong:
            print("out of date (run `make chart`): " + ", ".join(sorted(wrong)), file=sys.stderr)
            return 1
        return 0
    write(files)
    print(f"{len(files)} files written under {CHART.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
