"""A stand-in for a kubelet's speed at removing a deleted test namespace's pods.

Upstream's preemption tests fill nodes to their limit and do not wait for the previous test's
namespace to be gone (framework.CheckTestingNSDeletedExcept waits only for "e2e-tests-"
namespaces; these are "sched-preemption-NNNN"). On real nodes a kubelet stops a deleted
namespace's pause containers within a second or so; here kube-controller-manager's namespace
controller may take several seconds to get to the pods, and the next test then finds a node
still holding the last test's pods (seen: "validates basic preemption works" failing in both
modes after the critical-pod test, kube-scheduler's own preemption included). So, while e2e.test
runs, the pods of every namespace being deleted are deleted at once with grace period 0. Only
terminating namespaces are touched: a running test's pods never are.
"""

from __future__ import annotations

import threading

from priogate.kube.client import ApiClient, ApiError

POLL_SECONDS = 0.5


class NamespaceJanitor:
    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self.stopped = threading.Event()
        self.deleted = 0
        self.thread = threading.Thread(target=self._run, name="namespace-janitor", daemon=True)

    def __enter__(self) -> NamespaceJanitor:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        while not self.stopped.wait(POLL_SECONDS):
            try:
                self.sweep()
            except (ApiError, OSError) as e:  # the API server busy or restarting: next round
                print(f">> namespace janitor: {e}", flush=True)

    def sweep(self) -> None:
        for ns in self.api.get("/api/v1/namespaces").get("items", []):
            meta = ns.get("metadata") or {}
            if not meta.get("deletionTimestamp"):
                continue
            name = meta["name"]
            for pod in self.api.get(f"/api/v1/namespaces/{name}/pods").get("items", []):
                pod_meta = pod.get("metadata") or {}
                try:
                    self.api.request(
                        "DELETE",
                        f"/api/v1/namespaces/{name}/pods/{pod_meta['name']}",
                        body={
                            "kind": "DeleteOptions",
                            "apiVersion": "v1",
                            "gracePeriodSeconds": 0,
                            "preconditions": {"uid": pod_meta.get("uid")},
                        },
                    )
                    self.deleted += 1
                except ApiError as e:
                    if e.status not in (404, 409):
                        raise
