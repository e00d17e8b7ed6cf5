"""Helpers for the e2e tests: kubectl, waits, and probes of what admission currently sees.

Admission (the built-in plugin's informer and priogate's watch cache alike) reads PriorityClasses
from a cache, so a class created a moment ago may not be visible yet. Tests wait until a dry-run
pod proves it is, instead of sleeping.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from localcluster.api import metric_sum
from localcluster.webhooks import WEBHOOK_METRIC
from priogate.kube.client import ApiClient
from tests import builders

KUBECTL = "/usr/bin/kubectl"
PAUSE = "registry.k8s.io/pause:3.10"
SYSTEM_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(interval)


def hook_creates(admin: ApiClient, hook: str) -> float:
    """The CREATEs kube-apiserver has sent `hook` so far (its own counter)."""
    return metric_sum(admin.get_text("/metrics"), WEBHOOK_METRIC, {"name": hook, "operation": "CREATE"})


def api_error(e: ApiException) -> tuple[int, str]:
    try:
        return e.status, json.loads(e.body).get("message", e.body)
    except (TypeError, ValueError):
        return e.status, str(e.body)


def refusal(create: Callable[[], Any]) -> tuple[int, str] | None:
    """(status, message) of a refused request, None if it went through."""
    try:
        create()
    except ApiException as e:
        return api_error(e)
    return None


@dataclass
class Kubectl:
    kubeconfig: Path
    # Act as this user (kubectl --as, the Impersonate-User header); the kubeconfig's own user
    # is in system:masters, which may impersonate anyone.
    as_user: str | None = None

    def __call__(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        who = [f"--as={self.as_user}"] if self.as_user else []
        result = subprocess.run(
            [KUBECTL, f"--kubeconfig={self.kubeconfig}", *who, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def apply(
        self, manifests: Iterable[Mapping[str, Any]], namespace: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        docs = yaml.safe_dump_all([dict(m) for m in manifests], sort_keys=False)
        ns = [f"--namespace={namespace}"] if namespace else []
        return self(*ns, "apply", "-f", "-", stdin=docs, check=check)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


@dataclass
class Admission:
    """Dry-run probes of what admission resolves right now, in a namespace it is not exempt from."""

    core: k8s.CoreV1Api
    namespace: str

    def resolve(self, class_name: str | None) -> tuple[int | None, str | None] | str:
        """(priority, priorityClassName) of a dry-run pod, or the denial message."""
        manifest = builders.pod(None, namespace=None, generate_name="p-", priority_class=class_name or None)
        try:
            pod = self.core.create_namespaced_pod(self.namespace, manifest, dry_run="All")
        except ApiException as e:
            return api_error(e)[1]
        return pod.spec.priority, pod.spec.priority_class_name

    def sees(
        self,
        present: Mapping[str, int],
        absent: Iterable[str] = (),
        default: tuple[int, str | None] | None = None,
    ) -> bool:
        for name, value in present.items():
            got = self.resolve(name)
            if not isinstance(got, tuple) or got[0] != value:
                return False
        for name in absent:
            got = self.resolve(name)
            if not (isinstance(got, str) and "no PriorityClass with name" in got):
                return False
        if default is not None:
            got = self.resolve(None)
            if got != default:
                return False
        return True

    def wait_sees(
        self,
        present: Mapping[str, int],
        absent: Iterable[str] = (),
        default: tuple[int, str | None] | None = None,
        timeout: float = 30,
    ) -> None:
        """Until two probes in a row agree (the webhook runs several workers, each with its own cache)."""
        absent = list(absent)
        streak = 0

        def check() -> bool:
            nonlocal streak
            streak = streak + 1 if self.sees(present, absent, default) else 0
            return streak >= 2

        wait_for(
            check, timeout, f"admission sees classes {dict(present)}, not {absent}, default {default}", 0.05
        )


def ensure_namespace(core: k8s.CoreV1Api, name: str, labels: Mapping[str, str] | None = None) -> None:
    """The namespace and its default ServiceAccount (created here rather than waiting for the
    serviceaccount controller, which the ServiceAccount admission plugin would otherwise need)."""
    for create in (
        lambda: core.create_namespace({"metadata": {"name": name, "labels": dict(labels or {})}}),
        lambda: core.create_namespaced_service_account(name, {"metadata": {"name": "default"}}),
    ):
        try:
            create()
        except ApiException as e:
            if e.status != 409:
                raise


def delete_namespace(core: k8s.CoreV1Api, name: str) -> None:
    try:
        core.delete_namespace(name, propagation_policy="Background")
    except ApiException as e:
        if e.status != 404:
            raise


def inert_webhook_configuration(name: str, namespace: str) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration named `name` whose one hook points at priogate's Service
    in `namespace` but matches nothing (a resource that does not exist) and fails open: a target
    for caBundle injection that can never affect a request."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "unused.priogate.io",
                "clientConfig": {"service": {"namespace": namespace, "name": "priogate-webhook"}},
                "rules": [
                    {
                        "apiGroups": ["example.invalid"],
                        "apiVersions": ["v1"],
                        "resources": ["nothing"],
                        "operations": ["CREATE"],
                    }
                ],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Ignore",
            }
        ],
    }
