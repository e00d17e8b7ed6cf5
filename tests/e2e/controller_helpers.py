"""Helpers for the controller's e2e tests: PodGroups' phases, member pods, the controller's metrics."""

from __future__ import annotations

import re

import requests

from priogate.kube.client import ApiClient, ApiError, resource_path
from tests.builders import pod, podgroup
from tests.e2e.helpers import wait_for

GROUP_VERSION = "scheduling.volcano.sh/v1beta1"


def groups_path(namespace: str, name: str | None = None) -> str:
    return resource_path(GROUP_VERSION, "podgroups", namespace, name)


def phase(client: ApiClient, namespace: str, name: str) -> str:
    return (client.get(groups_path(namespace, name)).get("status") or {}).get("phase") or ""


def wait_phase(client: ApiClient, namespace: str, name: str, want: str, timeout: float = 60) -> dict:
    seen: list[str] = []

    def check() -> bool:
        got = phase(client, namespace, name)
        if not seen or seen[-1] != got:
            seen.append(got)
        return got == want

    wait_for(check, timeout, f"PodGroup {namespace}/{name} is {want} (phases seen: {seen})", 0.2)
    return client.get(groups_path(namespace, name))


def pod_running(client: ApiClient, namespace: str, name: str) -> bool:
    try:
        return (client.get(resource_path("v1", "pods", namespace, name)).get("status") or {}).get(
            "phase"
        ) == "Running"
    except ApiError as e:
        if e.status == 404:
            return False
        raise


def delete_pod(client: ApiClient, namespace: str, name: str) -> None:
    try:
        client.delete(resource_path("v1", "pods", namespace, name))
    except ApiError as e:
        if e.status != 404:
            raise


def metric(base_url: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    text = requests.get(f"{base_url}/metrics", timeout=5, proxies={"http": "", "https": ""}).text
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(got.get(k) == v for k, v in (labels or {}).items()):
            total += float(match.group(3))
    return total


def stuck_gang(client: ApiClient, namespace: str, name: str, priority_class: str) -> None:
    """A PodGroup of `priority_class` whose one member, of the same class, no node can take (a
    node selector no node matches): Inqueue, needing preemption, and beyond kube-scheduler's own
    (no node passes its filters), so only a recorded decision acts on it."""
    client.create(
        groups_path(namespace), podgroup(name, namespace=None, min_member=1, priority_class=priority_class)
    )
    member = pod(
        "m0",
        namespace=None,
        cpu="100m",
        group=name,
        priority_class=priority_class,
        node_selector={"kubernetes.io/hostname": "nowhere"},
    )
    path = resource_path("v1", "pods", namespace, "m0")
    client.create(resource_path("v1", "pods", namespace), member)
    wait_phase(client, namespace, name, "Inqueue")

    def unschedulable() -> bool:
        conditions = client.get(path)["status"].get("conditions") or []
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

    wait_for(unschedulable, 60, "the scheduler marks the member Unschedulable")
