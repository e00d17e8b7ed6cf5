"""Loads tests/data/priority-cases.yaml (or podgroup-priority-cases.yaml) and turns each case into
what a test needs: the stored PriorityClasses, the AdmissionReviews kube-apiserver would send, and
the expected outcome.

Shared by the in-process acceptance test and the e2e differential test.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent / "data" / "priority-cases.yaml"
PODGROUP_DATA = Path(__file__).parent / "data" / "podgroup-priority-cases.yaml"

# Layers that belong to kube-apiserver itself, not to an admission webhook.
NOT_OURS = {
    "pod-validation": "pod update validation (immutable spec fields) is kube-apiserver's, after admission",
    "podgroup-validation": (
        "PodGroup validation (immutable fields, the 1000000000 maximum) is kube-apiserver's, after admission"
    ),
    "storage": "'already exists' is etcd storage's answer; a webhook never sees a duplicate create",
    "decode": "JSON decoding and int32 range are checked before any admission webhook is called",
    "resourcequota-admission": (
        "limitedResources comes from kube-apiserver's ResourceQuota admission configuration file, "
        "which priogate does not own"
    ),
}

PATHS = {
    "pods": "/mutate/pods",
    "priorityclasses": "/validate/priorityclasses",
    "podgroups": "/mutate/native-podgroups",
}
KINDS = {
    "pods": {"group": "", "version": "v1", "kind": "Pod"},
    "priorityclasses": {"group": "scheduling.k8s.io", "version": "v1", "kind": "PriorityClass"},
    "podgroups": {"group": "scheduling.k8s.io", "version": "v1alpha2", "kind": "PodGroup"},
}


@dataclass
class Case:
    id: str
    raw: dict[str, Any]
    builtin: list[dict[str, Any]]

    @property
    def verb(self) -> str:
        return self.raw["operation"]["verb"]

    @property
    def resource(self) -> str:
        return self.raw["operation"]["resource"]

    @property
    def expected(self) -> dict[str, Any]:
        return self.raw["expected"]

    @property
    def namespace(self) -> str | None:
        return self.raw["preconditions"].get("namespace")

    @property
    def skip_reason(self) -> str | None:
        return NOT_OURS.get(self.expected.get("layer", ""))

    def stored_classes(self) -> list[dict[str, Any]]:
        pre = self.raw["preconditions"]
        classes = (self.builtin if pre.get("builtinSystemClasses") else []) + (
            pre.get("priorityClasses") or []
        )
        return [default_priority_class(pc) for pc in classes]


def default_priority_class(pc: dict[str, Any]) -> dict[str, Any]:
    """What kube-apiserver's defaulting does before any webhook sees the class (PC-DEF-1)."""
    pc = copy.deepcopy(pc)
    if pc.get("preemptionPolicy") is None:
        pc["preemptionPolicy"] = "PreemptLowerPriority"
    pc.setdefault("globalDefault", False)
    return pc


def load_cases(path: Path = DATA) -> list[Case]:
    doc = yaml.safe_load(path.read_text())
    return [Case(c["id"], c, doc["builtin_system_classes"]) for c in doc["cases"]]


def review(case: Case, *, name: str | None = None, old: dict | None = None, new: dict | None = None) -> dict:
    """The AdmissionReview kube-apiserver would send for the case's request (one item for DELETE)."""
    op = case.raw["operation"]
    verb = "DELETE" if case.verb == "DELETECOLLECTION" else case.verb
    obj = copy.deepcopy(new if new is not None else op.get("object"))
    old_obj = copy.deepcopy(old if old is not None else op.get("oldObject"))
    if case.resource == "priorityclasses" and obj is not None:
        obj = default_priority_class(obj)
    target = obj or old_obj or {}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": KINDS[case.resource],
        "resource": {**KINDS[case.resource], "resource": case.resource},
        "operation": verb,
        "name": name or op.get("name") or target.get("metadata", {}).get("name", ""),
        "object": obj if verb != "DELETE" else None,
        "oldObject": old_obj,
        "dryRun": False,
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
    }
    if op.get("subresource"):
        request["subResource"] = op["subresource"]
    if case.namespace:
        request["namespace"] = case.namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def message_matches(expected: dict[str, Any], message: str) -> list[str]:
    """Problems with a denial message against expected.message_*; empty when it matches."""
    problems = [f"missing {s!r}" for s in expected.get("message_contains", []) if s not in message]
    any_of = expected.get("message_any_of")
    if any_of and not any(s in message for s in any_of):
        problems.append(f"none of {any_of!r}")
    problems += [f"unexpected {s!r}" for s in expected.get("message_not_contains", []) if s in message]
    return problems
