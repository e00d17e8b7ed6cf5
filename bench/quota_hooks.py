"""How `make bench-quota` sets each run's hooks: priogate's quota hooks taken out or put back,
the floor's hook, and the namespaces the runs create in."""

from __future__ import annotations

import copy

from localcluster.api import metric_sum
from localcluster.procs import wait_until
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from priogate.scope import COVERED, ENROLLED_LABEL, ENROLLED_VALUE, probe_body
from tests.replicas import edit_hooks

QUOTA_HOOKS = ("podgroup-quota.priogate.io", "podgroup-enrolment.priogate.io")
# The floor's hook: the reservation hook's registration, renamed and sent to a rule that reads
# and writes nothing for a PodGroup without priogate's annotations (webhook.rules.podgroup_annotations).
FLOOR_HOOK = "podgroup-floor.bench.priogate.io"
FLOOR_PATH = "/validate/podgroup-annotations"


def prepare(client: ApiClient, namespace: str, quota_cpu: int) -> None:
    create_namespace(client, namespace)
    create_quota(client, namespace, quota_cpu)


def create_namespace(client: ApiClient, namespace: str) -> None:
    # Enrolled (priogate.scope) as after its first claim: every admission measured goes to the
    # reservation hook, at the replicas, not to the once-per-namespace enrolment.
    enrolled = {ENROLLED_LABEL: ENROLLED_VALUE}
    client.create("/api/v1/namespaces", {"metadata": {"name": namespace, "labels": enrolled}})


def create_quota(client: ApiClient, namespace: str, quota_cpu: int) -> None:
    """The namespace's quota. Its create takes a turn on the namespace's ledger (the quota fence),
    so the server that answers it writes the ledger first and holds its turn."""
    client.create(
        resource_path("v1", "resourcequotas", namespace),
        {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": str(quota_cpu)}}},
    )


def covered(client: ApiClient, namespace: str) -> bool:
    """Whether kube-apiserver calls the reservation hook in `namespace` (the coverage probe)."""
    try:
        client.create(resource_path(GROUP_VERSION, PLURAL, namespace), probe_body(), dry_run=True)
    except ApiError as e:
        if COVERED in e.message:
            return True
        raise
    return False


def set_quota_hooks(client: ApiClient, hooks: list[dict] | None, namespace: str) -> list[dict]:
    """Take priogate's quota hooks out of the configuration (hooks None) or put `hooks` back;
    returns the hooks taken out. Waits until kube-apiserver acts on the change."""
    taken: list[dict] = []

    def change(current: list[dict]) -> list[dict]:
        taken[:] = [h for h in current if h["name"] in QUOTA_HOOKS]
        kept = [h for h in current if h["name"] not in QUOTA_HOOKS]
        return kept if hooks is None else kept + hooks

    edit_hooks(client, change)
    wait_until(
        lambda: covered(client, namespace) == (hooks is not None),
        timeout=30,
        what="kube-apiserver to act on the changed webhook configuration",
    )
    return taken


def floor_calls(client: ApiClient) -> float:
    """How many requests kube-apiserver has sent the floor's hook."""
    text = client.get_text("/metrics")
    return metric_sum(text, "apiserver_admission_webhook_request_total", {"name": FLOOR_HOOK})


def set_floor_hook(client: ApiClient, quota_hooks: list[dict], url: str | None, namespace: str) -> None:
    """Add the floor's hook, sent to `url` (a copy of the reservation hook in `quota_hooks`), or
    (url None) take it out. Waits until kube-apiserver calls it: a dry-run create it is sent."""
    hook = copy.deepcopy(next(h for h in quota_hooks if h["name"] == QUOTA_HOOKS[0]))
    hook["name"] = FLOOR_HOOK
    hook["clientConfig"] = {**hook["clientConfig"], "url": f"{url}{FLOOR_PATH}"}
    edit_hooks(
        client,
        lambda current: [h for h in current if h["name"] != FLOOR_HOOK] + ([hook] if url else []),
    )
    if url is None:
        return

    def called() -> bool:
        before = floor_calls(client)
        client.create(resource_path(GROUP_VERSION, PLURAL, namespace), probe_body(), dry_run=True)
        return floor_calls(client) > before

    wait_until(called, timeout=30, what="kube-apiserver to call the floor's hook")
