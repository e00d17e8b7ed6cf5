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
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hack.chart_hooks import CERTS, CLEANUP, certs_hook_objects, cleanup_hook_objects  # noqa: E402
from hack.chart_readme import readme  # noqa: E402
from hack.chart_templates import (  # noqa: E402
    HEADER,
    SPECIAL,
    Markers,
    dump,
    extra_excluded_namespaces,
    hook_overrides,
    only_with_preview,
    standard_labels,
)
from hack.chart_values import PULL_POLICY, kustomize_image, values_schema, values_yaml  # noqa: E402
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
    "--wait` runs post-install hooks only once the webhook is ready; chart_hooks.certs_hook_objects). "
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


def file_name(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


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
