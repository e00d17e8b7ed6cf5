"""charts/priogate/ against manifests/: the chart is generated from the kustomize base
(hack/chart.py) and, rendered with default values (`helm template`), gives the same objects as
`kubectl kustomize manifests/`, apart from hack/chart.DIFFERENCES. Chart.yaml's kubeVersion, the
values' documentation and the recommended labels are true to what it renders."""

from __future__ import annotations

import copy
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from localcluster.binaries import REPO
from tests.unit.chart_render import (
    CHART,
    NAMESPACE,
    Key,
    defaults,
    helm,
    index,
    kustomize,
    render,
    without_standard_labels,
)


def test_generated_files_are_up_to_date() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def without_helm_hook(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    annotations = obj["metadata"].get("annotations", {})
    for k in [k for k in annotations if k.startswith("helm.sh/hook")]:
        del annotations[k]
    if not annotations:
        obj["metadata"].pop("annotations", None)
    return obj


def assert_same_objects(chart: dict[Key, dict], base: dict[Key, dict]) -> None:
    # The only object the chart leaves out: Helm's --create-namespace makes it (DIFFERENCES).
    assert set(base) - set(chart) == {("Namespace", NAMESPACE)}
    # The only ones it adds: the pre-install hooks that create the serving Secret (DIFFERENCES).
    generator = load_generator()
    assert set(chart) == set(base) - {("Namespace", NAMESPACE)} | generator.CHART_ONLY
    cluster_scoped = generator.CLUSTER_SCOPED_POLICY_KINDS
    for key, obj in chart.items():
        if key in generator.CHART_ONLY:
            continue
        expected = base[key]
        if key[0] in cluster_scoped:
            expected = {
                **expected,
                "metadata": {k: v for k, v in expected["metadata"].items() if k != "namespace"},
            }
        obj = without_standard_labels(obj, expected)
        assert without_helm_hook(obj) == expected, f"{key} differs from kubectl kustomize manifests/"


def test_defaults_render_the_kustomize_base_object_by_object() -> None:
    assert_same_objects(defaults(), kustomize())


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_chart", REPO / "hack" / "chart.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_manifests_change_reaches_the_chart_by_regenerating_it(tmp_path: Path) -> None:
    """What the ledger move will do to rbac.yaml (a Role in priogate's namespace, a rule taken out
    of a ClusterRole), done to a copy: `make chart` carries it over with nothing typed twice."""
    manifests, chart = tmp_path / "manifests", tmp_path / "chart"
    shutil.copytree(REPO / "manifests", manifests)
    shutil.copytree(CHART, chart)
    rbac = manifests / "rbac.yaml"
    docs = [d for d in yaml.safe_load_all(rbac.read_text()) if d]
    webhook_role = next(
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "priogate-webhook"
    )
    webhook_role["rules"] = [r for r in webhook_role["rules"] if r["resources"] != ["configmaps"]]
    docs.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "priogate-ledger"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]}],
        }
    )
    rbac.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    generator = load_generator()
    generator.write(generator.generate(manifests, chart), chart)
    rendered = render(chart=chart)
    assert_same_objects(rendered, kustomize(manifests))
    assert rendered["Role", "priogate-ledger"]["metadata"]["namespace"] == NAMESPACE
    assert render(chart=chart, namespace="gate")["Role", "priogate-ledger"]["metadata"]["namespace"] == "gate"


def test_helm_lint_is_clean() -> None:
    r = subprocess.run([str(helm()), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def test_install_docs_document_every_value() -> None:
    def leaves(d: dict, prefix: str = "") -> list[str]:
        out = []
        for k, v in d.items():
            if isinstance(v, dict) and v and k not in ("resources", "labels"):
                out += leaves(v, f"{prefix}{k}.")
            else:
                out.append(prefix + k)
        return out

    readme = (CHART / "README.md").read_text()
    missing = [k for k in leaves(_values()) if f"| `{k}` |" not in readme]
    assert not missing, f"charts/priogate/README.md's values table lacks {missing}"
    undocumented = [r for r in load_readme_rows() if not r[2]]
    assert not undocumented, f"values.yaml has no comment above {undocumented}"


def load_readme_rows() -> list[tuple[str, str, str]]:
    sys.path.insert(0, str(REPO))
    from hack.chart_readme import rows

    return rows((CHART / "values.yaml").read_text())


# --- kubeVersion: the oldest Kubernetes that serves every object the chart renders by default ---

# The Kubernetes minor version each rendered (apiVersion, kind) needs, from the API's or the
# field's graduation (https://kubernetes.io/docs/reference/using-api/deprecation-guide/ and the
# release notes): webhooks' matchConditions are GA in 1.30; MutatingAdmissionPolicy (KEP-3962)
# is served as admissionregistration.k8s.io/v1 from 1.36; ValidatingAdmissionPolicy (KEP-3488)
# from 1.30.
MINIMUM_MINOR = {
    ("v1", "ConfigMap"): 0,
    ("v1", "Pod"): 0,
    ("v1", "Service"): 0,
    ("v1", "ServiceAccount"): 0,
    ("apps/v1", "Deployment"): 9,
    ("batch/v1", "Job"): 0,
    ("networking.k8s.io/v1", "NetworkPolicy"): 7,
    ("policy/v1", "PodDisruptionBudget"): 21,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): 8,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): 8,
    ("rbac.authorization.k8s.io/v1", "Role"): 8,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): 8,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): 16,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): 30,
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): 30,
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): 36,
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): 36,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): 30,
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): 30,
}


def _kube_version_floor() -> int:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    m = re.fullmatch(r">=\s*1\.(\d+)\.0-0", chart["kubeVersion"])
    assert m, f"kubeVersion {chart['kubeVersion']!r}: expected '>=1.N.0-0'"
    return int(m.group(1))


@pytest.mark.parametrize("plugin", [True, False])
def test_kube_version_is_true_to_what_the_default_install_renders(plugin: bool) -> None:
    objs = render(f"priorityPlugin={str(plugin).lower()}")
    kinds = {(o["apiVersion"], o["kind"]) for o in objs.values()}
    assert kinds <= set(MINIMUM_MINOR), f"add the minimum version of {kinds - set(MINIMUM_MINOR)}"
    needed = max(MINIMUM_MINOR[k] for k in kinds)
    assert _kube_version_floor() == needed, (
        f"Chart.yaml kubeVersion allows 1.{_kube_version_floor()}, "
        f"but the chart renders {[k for k in kinds if MINIMUM_MINOR[k] > _kube_version_floor()]}, "
        f"which need 1.{needed}"
    )


def test_helm_refuses_a_cluster_older_than_kube_version() -> None:
    floor = _kube_version_floor()
    base = [str(helm()), "template", "priogate", str(CHART), "-n", NAMESPACE]
    old = subprocess.run([*base, "--kube-version", f"1.{floor - 1}.9"], capture_output=True, text=True)
    assert old.returncode != 0 and "chart requires kubeVersion" in old.stderr, old.stderr
    new = subprocess.run([*base, "--kube-version", f"1.{floor}.0"], capture_output=True, text=True)
    assert new.returncode == 0, new.stderr
    assert "kind: MutatingAdmissionPolicy\n" in new.stdout


def test_every_object_carries_the_recommended_labels() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    expected = {
        "app.kubernetes.io/name": "priogate",
        "app.kubernetes.io/instance": "rel",
        "app.kubernetes.io/version": chart["appVersion"],
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": f"priogate-{chart['version']}",
    }
    args = [str(helm()), "template", "rel", str(CHART), "-n", NAMESPACE]
    sets = ["--set", "priorityPlugin=false", "--set", "monitoring.prometheusRule.enabled=true"]
    sets += [
        "--set",
        "monitoring.grafanaDashboard.enabled=true",
        "--set",
        "monitoring.podMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.enabled=true",
    ]
    objs = index(subprocess.run([*args, *sets], capture_output=True, text=True, check=True).stdout)
    objs |= index(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    missing = {
        f"{k[0]}/{k[1]}": {
            label: v for label, v in expected.items() if o["metadata"].get("labels", {}).get(label) != v
        }
        for k, o in objs.items()
    }
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"{len(missing)} of {len(objs)} objects lack recommended labels: {missing}"
