"""Perform one acceptance case (tests/data/priority-cases.yaml, podgroup-priority-cases.yaml) as
real API requests and record the outcome: allowed or denied (code, message), and the resulting pod
or native PodGroup priority fields, stored PriorityClass fields, remaining classes or charged
quotas.

Preconditions are reached through the API where the API allows them. Two states admission
refuses on purpose are written to etcd directly, as the race they model would leave them:
a second globalDefault class (PC-A3 race state), and absent built-in classes (SYS-3, which
priogate deliberately refuses through the API).
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from localcluster.api import Etcd
from tests.e2e.differential_podgroups import PodGroups
from tests.e2e.differential_podgroups import fields as podgroup_fields
from tests.e2e.helpers import (
    SYSTEM_CLASSES,
    Admission,
    api_error,
    delete_namespace,
    ensure_namespace,
)

POD_FIELDS = (
    ("priority", "priority"),
    ("preemptionPolicy", "preemption_policy"),
    ("priorityClassName", "priority_class_name"),
)
PC_KEY = "/registry/priorityclasses/"
QUOTA_SETTLE_SECONDS = 1.0  # see CaseRunner._quotas


@dataclass
class Outcome:
    allowed: bool
    status: int | None = None
    message: str | None = None
    pod: dict[str, Any] | None = None
    priority_class: dict[str, Any] | None = None
    remaining: list[str] | None = None
    quota_charged: list[str] | None = None
    pod_group: dict[str, Any] | None = None
    error: str | None = None  # the harness itself failed (not an admission outcome)

    def comparable(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "status": None if self.allowed else self.status,
            "pod": self.pod,
            "priorityClass": self.priority_class,
            "remaining_priority_classes": self.remaining,
            "quota_charged": self.quota_charged,
            "podGroup": self.pod_group,
        }


def _pc_fields(pc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "value": pc.get("value", 0),
        "globalDefault": bool(pc.get("globalDefault", False)),
        "preemptionPolicy": pc.get("preemptionPolicy") or "PreemptLowerPriority",
        "description": pc.get("description", ""),
    }


@dataclass
class CaseRunner:
    api_client: k8s.ApiClient
    etcd: Etcd
    admission: Admission
    builtin_classes: list[dict[str, Any]]
    tag: str
    cleanup_pods: list[tuple[str, str]] = field(default_factory=list)
    cleanup_quotas: list[tuple[str, str]] = field(default_factory=list)
    cleanup_podgroups: bool = False  # native PodGroups in kube-system

    def __post_init__(self) -> None:
        self.core = k8s.CoreV1Api(self.api_client)
        self.scheduling = k8s.SchedulingV1Api(self.api_client)
        self.podgroups = PodGroups(self.api_client)

    # ---- preconditions -----------------------------------------------------------------------

    def _classes(self) -> dict[str, dict[str, Any]]:
        items = self.scheduling.list_priority_class().items
        return {pc.metadata.name: self.api_client.sanitize_for_serialization(pc) for pc in items}

    def _remove_class(self, name: str) -> None:
        if name in SYSTEM_CLASSES:
            self.etcd.delete(PC_KEY + name)  # a single DELETE of a system class is refused (SYS-2)
        else:
            self.scheduling.delete_priority_class(name)

    def _seed_in_etcd(self, pc: Mapping[str, Any]) -> None:
        meta = {
            "name": pc["metadata"]["name"],
            "uid": str(uuid.uuid4()),
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": meta,
            **_pc_fields(pc),
        }
        self.etcd.put(PC_KEY + meta["name"], json.dumps(body).encode())

    def reset_classes(self, pre: Mapping[str, Any]) -> None:
        desired = {pc["metadata"]["name"]: pc for pc in pre.get("priorityClasses") or []}
        if pre.get("builtinSystemClasses"):
            for pc in self.builtin_classes:
                desired.setdefault(pc["metadata"]["name"], pc)
        current = self._classes()
        removed = []
        for name, pc in current.items():
            if name not in desired or _pc_fields(pc) != _pc_fields(desired[name]):
                self._remove_class(name)
                removed.append(name)
        if removed:
            # Admission must have forgotten them before anything is created under the same name,
            # or as a new default (it would still count the old one: 403).
            self.admission.wait_sees({}, absent=removed)
        kept = {n for n in current if n not in removed}
        has_default = any(_pc_fields(current[n])["globalDefault"] for n in kept)
        created = {}
        for name, pc in desired.items():
            if name in kept:
                continue
            created[name] = _pc_fields(pc)["value"]
            if _pc_fields(pc)["globalDefault"] and has_default:
                self._seed_in_etcd(pc)  # a second default: the race state admission refuses (PC-A3)
            else:
                body = {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    **copy.deepcopy(dict(pc)),
                }
                self.scheduling.create_priority_class(body)
            has_default = has_default or _pc_fields(pc)["globalDefault"]
        defaults = sorted(
            (_pc_fields(pc)["value"], name) for name, pc in desired.items() if _pc_fields(pc)["globalDefault"]
        )
        self.admission.wait_sees(created, default=(defaults[0][0], defaults[0][1]) if defaults else (0, None))

    def _quotas(self, namespace: str, quotas: list[Mapping[str, Any]]) -> None:
        """Create the quotas and write their status (hard, and zero used: the namespace is fresh) the
        way kube-controller-manager would, so ResourceQuota admission can use them at once
        instead of after the controller's informers have caught up with a restarted apiserver."""
        for q in quotas:
            name = q["metadata"]["name"]
            body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}}
            body["spec"] = copy.deepcopy(q["spec"])
            created = self.core.create_namespaced_resource_quota(namespace, body)
            if namespace == "kube-system":
                self.cleanup_quotas.append((namespace, name))
            self._fill_status(namespace, name, created)
        if quotas:
            # kube-apiserver's ResourceQuota admission reads quotas from its informer; when that
            # has none for the namespace it looks them up live and keeps the answer in an LRU for
            # 30 s (k8s.io/apiserver pkg/admission/plugin/resourcequota resource_access.go). The
            # namespace's own objects (its ServiceAccount, kube-root-ca.crt) may have primed that
            # LRU with "no quotas" already, so the case's pod would go uncharged until the
            # informer hears of the new quota: milliseconds on a quiet machine, more than 0.2 s
            # seen under a full test run on 2 cores (4 cases wait so). Upstream's
            # quota e2e tests wait for the quota controller for the same reason.
            time.sleep(QUOTA_SETTLE_SECONDS)

    def _fill_status(self, namespace: str, name: str, quota: k8s.V1ResourceQuota) -> None:
        for _attempt in range(5):
            if quota.status and quota.status.hard:
                return  # kube-controller-manager was first
            quota.status = {"hard": dict(quota.spec.hard), "used": dict.fromkeys(quota.spec.hard, "0")}
            try:
                self.core.replace_namespaced_resource_quota_status(name, namespace, quota)
                return
            except ApiException as e:
                if e.status != 409:
                    raise
            quota = self.core.read_namespaced_resource_quota(name, namespace)
        raise RuntimeError(f"could not write the status of quota {namespace}/{name}")

    def _used_pods(self, namespace: str) -> dict[str, str]:
        items = self.core.list_namespaced_resource_quota(namespace).items
        return {q.metadata.name: (q.status.used or {}).get("pods", "0") for q in items}

    # ---- the request -------------------------------------------------------------------------

    def run(self, case: Mapping[str, Any], index: int) -> Outcome:
        pre = case["preconditions"]
        case_ns = pre.get("namespace")
        ns = None
        if case_ns == "kube-system":
            ns = "kube-system"
        elif case_ns:
            ns = f"diff-{self.tag}-{index:02d}-{re.sub('[^a-z0-9-]', '', case['id'])}"[:63].rstrip("-")
            ensure_namespace(self.core, ns)
        try:
            self.reset_classes(pre)
            if ns:
                self._quotas(ns, pre.get("resourceQuotas") or [])
            return self._perform(case["operation"], ns)
        except Exception as e:  # the harness failed: reported by the test of this case
            return Outcome(allowed=False, error=f"{type(e).__name__}: {e}")
        finally:
            self._cleanup(ns if ns and ns != "kube-system" else None)

    def _cleanup(self, namespace: str | None) -> None:
        for ns, name in self.cleanup_pods:
            try:
                self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        for ns, name in self.cleanup_quotas:
            self.core.delete_namespaced_resource_quota(name, ns)
        if self.cleanup_podgroups:
            self.podgroups.delete_all("kube-system")
        self.cleanup_pods.clear()
        self.cleanup_quotas.clear()
        self.cleanup_podgroups = False
        if namespace:
            delete_namespace(self.core, namespace)

    def _perform(self, op: Mapping[str, Any], ns: str | None) -> Outcome:
        verb, resource = op["verb"], op["resource"]
        try:
            if resource == "pods" and verb == "CREATE":
                return self._create_pod(op["object"], ns)
            if resource == "pods" and verb == "UPDATE":
                return self._update_pod(op, ns)
            if resource == "priorityclasses":
                return self._priority_class(op)
            if resource == "podgroups":
                return self._podgroup(op, ns)
        except ApiException as e:
            status, message = api_error(e)
            return Outcome(allowed=False, status=status, message=message)
        raise ValueError(f"unsupported operation {verb} {resource}")

    def _podgroup(self, op: Mapping[str, Any], ns: str | None) -> Outcome:
        assert ns
        self.cleanup_podgroups = self.cleanup_podgroups or ns == "kube-system"
        if op["verb"] == "CREATE":
            group = self.podgroups.create(op["object"], ns)
        elif op["verb"] == "UPDATE":
            group = self.podgroups.update(op, ns)
        else:
            raise ValueError(f"unsupported verb {op['verb']} on podgroups")
        return Outcome(allowed=True, pod_group=podgroup_fields(group))

    def _pod_outcome(self, pod: k8s.V1Pod, **extra: Any) -> Outcome:
        fields = {key: getattr(pod.spec, attr) for key, attr in POD_FIELDS}
        return Outcome(allowed=True, pod=fields, **extra)

    def _create_pod(self, obj: Mapping[str, Any], ns: str | None) -> Outcome:
        assert ns
        body = copy.deepcopy(dict(obj))
        body["metadata"]["namespace"] = ns
        before = self._used_pods(ns)
        pod = self.core.create_namespaced_pod(ns, body)
        if ns == "kube-system":
            self.cleanup_pods.append((ns, pod.metadata.name))
        after = self._used_pods(ns)
        charged = sorted(n for n in after if after[n] != before.get(n))
        return self._pod_outcome(pod, quota_charged=charged)

    def _update_pod(self, op: Mapping[str, Any], ns: str | None) -> Outcome:
        """Create oldObject, then PUT the stored pod with the case's changes applied (a PUT of the
        bare manifest would also drop every defaulted field, which pod validation refuses)."""
        assert ns
        old, new = op["oldObject"], op["object"]
        created = self._create_pod(old, ns)
        if not created.allowed:
            raise RuntimeError(f"could not create the case's oldObject: {created}")
        name = old["metadata"]["name"]
        for _attempt in range(5):
            stored = self.api_client.sanitize_for_serialization(self.core.read_namespaced_pod(name, ns))
            spec = stored["spec"]
            for key, _ in POD_FIELDS:
                if key in new["spec"]:
                    spec[key] = new["spec"][key]
                else:
                    spec.pop(key, None)
            for i, container in enumerate(new["spec"].get("containers", [])):
                spec["containers"][i]["image"] = container["image"]
            try:
                if op.get("subresource") == "status":
                    stored["status"] = {**stored.get("status", {}), **new.get("status", {})}
                    pod = self.core.replace_namespaced_pod_status(name, ns, stored)
                else:
                    pod = self.core.replace_namespaced_pod(name, ns, stored)
                return self._pod_outcome(pod)
            except ApiException as e:
                if e.status != 409:  # 409: the scheduler or kwok wrote the pod meanwhile
                    raise
        raise RuntimeError(f"pod {ns}/{name} kept changing; could not apply the update")

    def _priority_class(self, op: Mapping[str, Any]) -> Outcome:
        verb = op["verb"]
        if verb == "CREATE":
            pc = self.scheduling.create_priority_class(copy.deepcopy(dict(op["object"])))
        elif verb == "UPDATE":
            body = copy.deepcopy(dict(op["object"]))
            current = self.scheduling.read_priority_class(body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            pc = self.scheduling.replace_priority_class(body["metadata"]["name"], body)
        elif verb == "DELETE":
            self.scheduling.delete_priority_class(op["name"])
            return Outcome(allowed=True)
        elif verb == "DELETECOLLECTION":
            try:
                self.scheduling.delete_collection_priority_class()
            except ApiException as e:
                status, message = api_error(e)
                return Outcome(
                    allowed=False, status=status, message=message, remaining=sorted(self._classes())
                )
            return Outcome(allowed=True, remaining=sorted(self._classes()))
        else:
            raise ValueError(f"unsupported verb {verb} on priorityclasses")
        fields = {
            "value": pc.value,
            "globalDefault": bool(pc.global_default),
            "preemptionPolicy": pc.preemption_policy,
        }
        return Outcome(allowed=True, priority_class=fields)


def expected_view(case: Mapping[str, Any]) -> dict[str, Any]:
    """The acceptance data's expectation, in Outcome.comparable() terms (only what it states)."""
    exp = case["expected"]
    view: dict[str, Any] = {"allowed": exp["allowed"]}
    if "status_code" in exp:
        view["status"] = exp["status_code"]
    if "pod" in exp:
        view["pod"] = exp["pod"]
    if "priorityClass" in exp:
        view["priorityClass"] = exp["priorityClass"]
    if "remaining_priority_classes" in exp:
        view["remaining_priority_classes"] = exp["remaining_priority_classes"]
    if "quota_charged" in exp:
        view["quota_charged"] = exp["quota_charged"]
    if "podGroup" in exp:
        view["podGroup"] = exp["podGroup"]
    return view


def message_problems(case: Mapping[str, Any], message: str | None) -> list[str]:
    exp = case["expected"]
    text = message or ""
    problems = [f"lacks {s!r}" for s in exp.get("message_contains", []) if s not in text]
    any_of = exp.get("message_any_of")
    if any_of and not any(s in text for s in any_of):
        problems.append(f"has none of {any_of!r}")
    problems += [f"contains {s!r}" for s in exp.get("message_not_contains", []) if s in text]
    return problems
