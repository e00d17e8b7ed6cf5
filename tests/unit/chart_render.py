"""Rendering charts/priogate/ for the chart's tests: `helm template` with values set, the kustomize
base, and the small lookups the tests share.

helm is the one hack/helm/build.sh builds (localcluster.binaries.ensure_helm)."""

from __future__ import annotations

import copy
import subprocess
from functools import cache
from pathlib import Path

import yaml

from hack.chart_templates import STANDARD_LABELS
from localcluster.binaries import REPO, ensure_helm

CHART = REPO / "charts" / "priogate"
NAMESPACE = "priogate-system"
Key = tuple[str, str]


@cache
def helm() -> Path:
    return ensure_helm()


def render(*sets: str, namespace: str = NAMESPACE, chart: Path = CHART) -> dict[Key, dict]:
    args = [str(helm()), "template", "priogate", str(chart), "-n", namespace, "--include-crds"]
    for s in sets:
        args += ["--set-json" if s.split("=", 1)[1][:1] in "[{" else "--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return index(out)


def index(text: str) -> dict[Key, dict]:
    objs: dict[Key, dict] = {}
    for d in yaml.safe_load_all(text):
        if d:
            key = (d["kind"], d["metadata"]["name"])
            assert key not in objs, f"{key} rendered twice"
            objs[key] = d
    return objs


@cache
def kustomize(manifests: Path = REPO / "manifests") -> dict[Key, dict]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(manifests)], capture_output=True, text=True, check=True
    ).stdout
    return index(out)


@cache
def defaults() -> dict[Key, dict]:
    return render()


def without_standard_labels(obj: dict, base: dict) -> dict:
    """The chart's object without the recommended labels the base does not carry (DIFFERENCES)."""
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].get("labels", {})
    kept = base["metadata"].get("labels", {})
    for k in STANDARD_LABELS:
        if k not in kept:
            labels.pop(k, None)
    if not labels:
        obj["metadata"].pop("labels", None)
    return obj


def container(objs: dict[Key, dict], deployment: str, name: str) -> dict:
    spec = objs["Deployment", deployment]["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def containers(obj: dict) -> list[dict]:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


def hook_of(obj: dict) -> tuple[set[str], int]:
    """The Helm hook events an object is created for (none: an ordinary release object) and its
    weight (https://helm.sh/docs/topics/charts_hooks/)."""
    annotations = obj["metadata"].get("annotations", {})
    events = {e.strip() for e in annotations.get("helm.sh/hook", "").split(",") if e.strip()}
    return events, int(annotations.get("helm.sh/hook-weight", "0"))
