"""`make bench-pod-create --class-access`: the class access policy's arm (bench/pod_create.py).

One class is restricted by priogate.io/allowed-namespaces and the bench's pods use another, so
the policy's parameter exists and every create is evaluated (webhook/class_access_policy.py).
Whether the policy is evaluated is proven by a dry-run pod of the restricted class in the bench's
namespace, which its selector does not match: refused while the binding is there, admitted once
it is gone.
"""

from __future__ import annotations

from typing import Any

from localcluster.api import delete_if_present
from localcluster.procs import wait_until
from localcluster.webhooks import CONFIG_PATHS
from priogate.kube.client import ApiClient, ApiError
from webhook.class_access_policy import POLICY_NAME

RESTRICTED = "bench-restricted"


def restrict_a_class(client: ApiClient, value: int) -> None:
    client.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": RESTRICTED,
                "annotations": {"priogate.io/allowed-namespaces": "tier in (prod,staging)"},
            },
            "value": value,
        },
    )


def await_evaluated(client: ApiClient, pods_path: str, pod: dict[str, Any], evaluated: bool) -> None:
    """Until a dry-run create of `pod` with the restricted class is refused (the policy is
    evaluated) or, five in a row, admitted (it is not)."""
    body = {**pod, "spec": {**pod["spec"], "priorityClassName": RESTRICTED}}
    streak = 0

    def refused() -> bool:
        try:
            client.create(pods_path, body, dry_run=True)
        except ApiError as e:
            if "may not be used" in str(e):
                return True
            raise
        return False

    def settled() -> bool:
        nonlocal streak
        streak = streak + 1 if refused() is evaluated else 0
        return streak >= (1 if evaluated else 5)

    wait_until(
        settled,
        timeout=60,
        what=f"the class access policy {'is' if evaluated else 'is not'} evaluated",
        interval=0.2,
    )


def drop_binding(client: ApiClient) -> None:
    delete_if_present(client, f"{CONFIG_PATHS['ValidatingAdmissionPolicyBinding']}/{POLICY_NAME}")
