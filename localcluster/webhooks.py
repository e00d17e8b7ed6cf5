"""Register priogate with kube-apiserver (url + caBundle) and prove it is in the request path.

Proof, not presence: after the configurations are created, kube-apiserver picks them up through
an informer, so their existence says nothing. The probe makes dry-run requests that every
registered webhook matches until kube-apiserver's own metric
apiserver_admission_webhook_request_total counts a successful call for each webhook name, and,
when the built-in Priority plugin is disabled, until a dry-run pod comes back with
spec.priority set (nothing else sets it then).

The quota hooks split namespaces by priogate's enrolment label (priogate.scope): the probe
namespace is enrolled, so its pods and PodGroups reach the pod and PodGroup quota hooks, and a
second, never-enrolled namespace takes the PodGroup probe that reaches the enrolment hook (a dry
run, which enrols nothing). A third names a default class that does not exist
(priogate.namespace_default), so its pod and native PodGroup probes reach the namespace default
hooks and are refused,
and a dry-run namespace whose label disagrees with its annotation reaches the label hook.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from localcluster.api import create_if_absent, create_or_replace, delete_if_present, metric_sum
from localcluster.pki import Pki
from localcluster.procs import Proc, progress, wait_until
from priogate import namespace_default
from priogate.gate import GATE
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.podgroup import GROUP_ANNOTATION
from priogate.priority_table import MARKER_ANNOTATION
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from webhook.policy import WebhookPolicy

PROBE_NAMESPACE = "priogate-probe"
UNENROLLED_PROBE_NAMESPACE = "priogate-probe-unenrolled"
DEFAULT_CLASS_PROBE_NAMESPACE = "priogate-probe-default-class"
# No PriorityClass of this name exists: every pod probe in that namespace is refused.
DEFAULT_CLASS_PROBE_CLASS = "priogate-probe-missing"
PRIOGATE_NAMESPACE = "priogate-system"
WEBHOOK_METRIC = "apiserver_admission_webhook_request_total"
CONFIG_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "MutatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings",
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    ),
}
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
# (API group, resource) -> [(collection path, dry-run body)] for the probe
# The gate guard is called only for an update that lifts priogate's gate: a pod that carries it
# (and names no PodGroup, so nothing ever lifts it), and a dry-run patch that removes it.
GATED_PROBE_POD = "priogate-gate-probe"
LIFT_GATE = {"spec": {"schedulingGates": [{"$patch": "delete", "name": GATE}]}}
PODGROUP_PROBE: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    # The annotation hook is called only for writes that carry a `priogate.io/` annotation (its
    # matchConditions); it refuses this one, which proves the call. Marked as the in-process
    # policy marks a group it leaves to the defaults hook (webhook/priority_policy.py): an
    # unmarked one it may resolve without a call. minResources: the enrolment hook is called
    # only for PodGroups that reserve something.
    "metadata": {
        "generateName": "probe-",
        "annotations": {"priogate.io/probe": "1", MARKER_ANNOTATION: "true"},
    },
    "spec": {"minMember": 1, "minResources": {"cpu": "0"}},
}
PROBES: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {
    ("", "pods"): [
        (
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                # Marked as the in-process policy marks a pod it leaves to the hook
                # (webhook/priority_policy.py): an unmarked one it may resolve without a call.
                # A member of a PodGroup, so the gate hook is called (its matchCondition).
                "metadata": {
                    "generateName": "probe-",
                    "annotations": {MARKER_ANNOTATION: "true", GROUP_ANNOTATION: "priogate-probe"},
                },
                "spec": {"containers": [{"name": "c", "image": PAUSE_IMAGE}]},
            },
        )
        for namespace in (PROBE_NAMESPACE, DEFAULT_CLASS_PROBE_NAMESPACE)
    ],
    # Annotated but not labelled: the label hook's matchCondition holds.
    ("", "namespaces"): [
        (
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "generateName": "priogate-probe-",
                    "annotations": {namespace_default.ANNOTATION: DEFAULT_CLASS_PROBE_CLASS},
                },
            },
        )
    ],
    # A dry run writes no quota fence (webhook.rules.quota_fence).
    ("", "resourcequotas"): [
        (
            f"/api/v1/namespaces/{PROBE_NAMESPACE}/resourcequotas",
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"generateName": "probe-"},
                "spec": {"hard": {"pods": "1"}},
            },
        )
    ],
    ("scheduling.k8s.io", "priorityclasses"): [
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "priogate-probe"},
                "value": 0,
            },
        )
    ],
    # Once in an enrolled namespace (the reservation hook) and once in one that is not (the
    # enrolment hook).
    ("scheduling.volcano.sh", "podgroups"): [
        (f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups", PODGROUP_PROBE)
        for ns in (PROBE_NAMESPACE, UNENROLLED_PROBE_NAMESPACE)
    ],
    ("scheduling.k8s.io", "podgroups"): [
        (
            f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{namespace}/podgroups",
            {
                "apiVersion": "scheduling.k8s.io/v1alpha2",
                "kind": "PodGroup",
                "metadata": {"generateName": "probe-"},
                "spec": {"schedulingPolicy": {"basic": {}}},
            },
        )
        for namespace in (PROBE_NAMESPACE, DEFAULT_CLASS_PROBE_NAMESPACE)
    ],
}


@dataclass
class Webhooks:
    api: ApiClient
    pki: Pki
    base_url: str
    registered: list[tuple[str, str]] = field(default_factory=list)  # (kind, name)
    hook_names: list[str] = field(default_factory=list)
    hook_resources: set[tuple[str, str]] = field(default_factory=set)  # (API group, resource)
    # (certificate, key) the webhook requires of its clients (mTLS), for server_ready.
    client_cert: tuple[Path, Path] | None = None

    def server_ready(self) -> bool:
        s = requests.Session()
        s.trust_env = False
        cert = tuple(map(str, self.client_cert)) if self.client_cert else None
        r = s.get(self.base_url + "/readyz", verify=str(self.pki.ca_crt), cert=cert, timeout=5)
        return r.status_code == 200

    def configurations(self, policy: WebhookPolicy, resources: Collection[str] | None = None) -> list[dict]:
        """The project's configurations (webhook.configuration) with each hook under its policy;
        `resources` keeps only the hooks for those resources."""
        from webhook.configuration import webhook_configurations

        out = []
        for config in webhook_configurations(self.base_url, self.pki.ca_pem(), policy=policy):
            hooks = [
                h
                for h in config.get("webhooks", [])
                if resources is None or any(set(r["resources"]) & set(resources) for r in h["rules"])
            ]
            if hooks:
                out.append({**config, "webhooks": hooks})
        return out

    def register(self, policy: WebhookPolicy, resources: Collection[str] | None = None) -> None:
        """Create (or replace) the configurations; `resources` limits them to hooks for those resources."""
        from webhook.configuration import policy_objects

        configs = self.configurations(policy, resources)
        extra = policy_objects(policy, PRIOGATE_NAMESPACE, resources)
        for obj in [*configs, *extra]:
            if obj["kind"] == "ConfigMap":  # the priority table: the controller's once written
                create_if_absent(self.api, resource_path("v1", "configmaps", PRIOGATE_NAMESPACE), obj)
                continue
            create_or_replace(self.api, CONFIG_PATHS[obj["kind"]], obj)
            key = (obj["kind"], obj["metadata"]["name"])
            if key not in self.registered:
                self.registered.append(key)
        self.hook_names = [h["name"] for c in configs for h in c["webhooks"]]
        # Subresources (pods/resize) are reached through their resource; the probe creates that.
        self.hook_resources = {
            (group, res)
            for c in configs
            for h in c["webhooks"]
            for r in h["rules"]
            for group in r["apiGroups"]
            for res in r["resources"]
            if "/" not in res
        }
        progress(f"registered webhooks {', '.join(self.hook_names)} ({policy.describe()})")

    def unregister(self) -> None:
        for kind, name in list(self.registered):
            delete_if_present(self.api, f"{CONFIG_PATHS[kind]}/{name}")
            self.registered.remove((kind, name))
        self.hook_names = []
        self.hook_resources = set()

    def ensure_probe_namespace(self) -> None:
        labels = {ENROLLED_LABEL: ENROLLED_VALUE}
        default_class = {
            "labels": {namespace_default.LABEL: namespace_default.LABEL_VALUE},
            "annotations": {namespace_default.ANNOTATION: DEFAULT_CLASS_PROBE_CLASS},
        }
        for namespace, enrolled in (
            (PROBE_NAMESPACE, True),
            (UNENROLLED_PROBE_NAMESPACE, False),
            (DEFAULT_CLASS_PROBE_NAMESPACE, False),
        ):
            meta: dict[str, Any] = {"name": namespace, **({"labels": labels} if enrolled else {})}
            if namespace == DEFAULT_CLASS_PROBE_NAMESPACE:
                meta.update(default_class)
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
            sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
            for path, body in (
                ("/api/v1/namespaces", ns),
                (f"/api/v1/namespaces/{namespace}/serviceaccounts", sa),
            ):
                try:
                    self.api.create(path, body)
                except ApiError as e:
                    if e.status != 409:
                        raise
            if enrolled or namespace == DEFAULT_CLASS_PROBE_NAMESPACE:  # it may be older than its marks
                marks = {"labels": labels} if enrolled else default_class
                self.api.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}",
                    body={"metadata": marks},
                    content_type="application/merge-patch+json",
                )

    def _probe_once(self) -> dict[str, Any]:
        """One dry-run request per resource the webhooks handle. A denial is fine: it proves the
        call as well as an admission does (_calls counts both)."""
        seen: dict[str, Any] = {}
        for resource in sorted(self.hook_resources):
            if resource not in PROBES:
                raise ValueError(
                    f"no dry-run probe for resource {resource!r}; add one to PROBES in {__file__}"
                )
            for path, body in PROBES[resource]:
                try:
                    created = self.api.create(path, body, dry_run=True)
                except ApiError as e:
                    if e.status >= 500:
                        raise
                    continue
                if resource == ("", "pods"):
                    seen["pod_priority"] = created["spec"].get("priority")
            if resource == ("", "pods"):
                self._probe_gate_guard()
        return seen

    def _probe_gate_guard(self) -> None:
        path = f"/api/v1/namespaces/{PROBE_NAMESPACE}/pods"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": GATED_PROBE_POD},
            "spec": {
                "containers": [{"name": "c", "image": PAUSE_IMAGE}],
                "schedulingGates": [{"name": GATE}],
            },
        }
        try:
            self.api.create(path, body)
        except ApiError as e:
            if e.status != 409:
                return  # the pod hooks are not answering yet: the next round creates it
        try:
            self.api.request(
                "PATCH",
                f"{path}/{GATED_PROBE_POD}",
                body=LIFT_GATE,
                content_type="application/strategic-merge-patch+json",
                query=[("dryRun", "All")],
            )
        except ApiError as e:
            if e.status >= 500:
                raise

    def probe(self, priority_plugin: bool, proc: Proc | None = None, timeout: float = 60.0) -> float:
        """Seconds until every registered webhook is provably called by kube-apiserver."""
        self.ensure_probe_namespace()
        t0 = time.monotonic()
        baseline = {name: self._calls(name) for name in self.hook_names}

        def effective() -> bool:
            seen = self._probe_once()
            pods = ("", "pods") in self.hook_resources
            if not priority_plugin and pods and seen.get("pod_priority") is None:
                return False
            return all(self._calls(name) > baseline[name] for name in self.hook_names)

        wait_until(
            effective,
            timeout=timeout,
            what=f"kube-apiserver calls the webhooks {', '.join(self.hook_names)} (dry-run probes)",
            proc=proc,
            interval=0.5,
        )
        elapsed = time.monotonic() - t0
        progress(f"webhooks are in the request path ({elapsed:.1f} s after registration)")
        return elapsed

    def _calls(self, hook_name: str) -> float:
        # The metric's code is the answer's status: 200 for an admission, the denial's code for
        # a refusal (403 from the annotation hook, which is called only for a probe it refuses).
        # A call that failed (unreachable, TLS, timeout) is counted under neither.
        text = self.api.get_text("/metrics")
        return sum(
            metric_sum(text, WEBHOOK_METRIC, {"name": hook_name, "code": code}) for code in ("200", "403")
        )
