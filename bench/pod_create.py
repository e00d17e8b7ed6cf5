"""`make bench-pod-create`: what priogate adds to a pod CREATE through the real kube-apiserver.

One run, one local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok, the priogate webhook and controller), both modes (docs/modes.md), 1 and 8 concurrent creators:

* **plugin kept**: kube-apiserver keeps its built-in Priority plugin throughout; the arms are
  priogate's webhook configurations (the plugin-kept policy) registered, and deleted.
* **plugin replaced**: the arms are priogate (plugin disabled, the plugin-replaced policy
  registered, with the in-process MutatingAdmissionPolicy that resolves the bench's pods from
  the controller's PriorityClass table, docs/modes.md) and the built-in plugin alone (plugin
  enabled, no configurations), so the figure is what replacing the plugin costs. Switching the
  plugin needs a kube-apiserver restart. `--floor` adds a third arm: no priogate configuration,
  only a constant MutatingAdmissionPolicy (floor_policy), the least an add-on can do in process.

Method. The arms run in interleaved batches through the same kube-apiserver process, namespace,
client and pod body, in the order A B B A A B ... (A B C C B A ... with `--floor`), so slow drift
on a shared machine (another job, a compaction, a GC) falls on every arm alike. Toggling the
configurations, rather than comparing kube-system with a user namespace, keeps everything but the
webhooks equal (a namespace differs in its quota, service account and limit-range admission work),
and it works in both modes (with the plugin replaced the pod priority hook exempts no namespace).
After each toggle the switch is proven, not assumed: kube-apiserver reads webhook configurations
through an informer, so a batch starts only once a dry-run probe shows the hooks are called
(registered) or no longer called (deleted), read from kube-apiserver's
apiserver_admission_webhook_request_total. After a restart, and after every toggle, the batch
waits a few seconds for the switch's own work to end (bench/interleaved.py), and unmeasured
creates warm the connections up.

Pods name a node that does not exist (spec.nodeName), so neither kube-scheduler nor kwok acts
on them and the only work per request is the create itself; every batch's pods are deleted
between batches, outside the measured time. Latency is the client's wall-clock time per POST;
each creator is a process of its own, with its own connection.

`--class-access restricted|none` (plugin kept) compares priogate with and without its class
access policy's binding (webhook/class_access_policy.py), with one class restricted that the
bench's pods do not use, or none (the policy's parameter does not exist).

`--preview` compares priogate with and without its preemption preview hook registered (each
mode the run measures; docs/priorityclass-policy.md): the hook is called only for dry runs, so
the bench's real creates pay kube-apiserver's evaluation of its matchCondition alone.

The namespace holds no reservations and is not enrolled (priogate.scope), so with the plugin
kept no priogate hook is called for its pods: the common case. `--enrolled` measures a
namespace where reservations exist, whose pod creates go through the pod quota hook.

Beside the client's latencies, each arm reports kube-apiserver's own mutating admission step
time and CPU per create (bench/interleaved.py), which the latencies' scheduling noise does not
reach.

stderr: progress; stdout: the figures, the last line
    pod create: p50 ratio X, p99 ratio Y (8 creators, plugin kept)
where a ratio is priogate's latency over the baseline's at that percentile.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import class_access_arm
from bench import pod_create_arms as arms
from bench.interleaved import Counters, Ratios, apiserver_counters, report, run_interleaved
from localcluster import LocalCluster, Options
from localcluster.api import create_or_replace, delete_if_present, metric_sum
from localcluster.components import ApiServerMode
from localcluster.procs import progress, wait_until
from localcluster.webhooks import CONFIG_PATHS, WEBHOOK_METRIC
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.priority import PREEMPT_LOWER_PRIORITY
from priogate.priority_table import MARKER_ANNOTATION
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from webhook.policy import PREVIEW_HOOKS, WebhookPolicy
from webhook.priority_policy import POLICY_NAME
from webhook.rules import preemption_preview

NAMESPACE = "bench-pod-create"
CLASS_VALUE = 1000  # bench-high's value
NOWHERE = "bench-no-such-node"  # no kubelet or scheduler acts on a pod bound here
CREATORS = (1, 8)


def pod_body() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "bench-", "labels": {"app": "bench"}},
        "spec": {
            "nodeName": NOWHERE,
            "priorityClassName": "bench-high",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def floor_policy() -> list[dict]:
    """`--floor`: the least any component outside kube-apiserver can do in process to give a pod
    its priority, a MutatingAdmissionPolicy with no params, no variables and no condition that
    sets the bench class's two values as constants. What it costs over the built-in plugin
    bounds from below what replacing the plugin can cost (docs/benchmarks.md)."""
    api = "admissionregistration.k8s.io/v1"
    name = "bench-floor-constant-priority"
    patch = (
        f"[JSONPatch{{op: 'add', path: '/spec/priority', value: {CLASS_VALUE}}},"
        f" JSONPatch{{op: 'add', path: '/spec/preemptionPolicy', value: '{PREEMPT_LOWER_PRIORITY}'}}]"
    )
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
    return [
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {"resourceRules": [{**rule, "scope": "Namespaced"}]},
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}],
            },
        },
        {
            "apiVersion": api,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name},
        },
    ]


_clients: dict[str, ApiClient] = {}


def _creator(job: tuple[str, str, int]) -> list[float]:
    """One creator (in a pool process): `n` pod creates in a row, the seconds each took."""
    kubeconfig, path, n = job
    if kubeconfig not in _clients:  # one client (one kept-alive connection) per process
        _clients[kubeconfig] = load_client(kubeconfig, pool_size=2)
    client = _clients[kubeconfig]
    body = pod_body()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.create(path, body)
        out.append(time.perf_counter() - t0)
    return out


class Bench:
    def __init__(self, cluster: LocalCluster, creates: int, warmup: int, enrolled: bool = False) -> None:
        assert cluster.kubeconfig
        self.cluster = cluster
        self.client: ApiClient = load_client(str(cluster.kubeconfig), pool_size=max(CREATORS) + 4)
        self.creates = creates
        self.warmup = warmup
        # Whether the namespace is enrolled (priogate.scope), as one that holds reservations:
        # only then does kube-apiserver call the pod quota hook for its pods.
        self.enrolled = enrolled
        self.pods_path = resource_path("v1", "pods", NAMESPACE)
        self.floor_applied = False
        # Started once, before any measurement: spawn, as the parent runs threads (the supervisor).
        self.pool = ProcessPoolExecutor(max(CREATORS), mp_context=multiprocessing.get_context("spawn"))

    def setup(self) -> None:
        labels = {ENROLLED_LABEL: ENROLLED_VALUE} if self.enrolled else {}
        self.client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE, "labels": labels}})
        wait_until(
            lambda: bool(self.client.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")),
            timeout=60,
            what=f"serviceaccount {NAMESPACE}/default exists",
        )
        self.client.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "bench-high"},
                "value": CLASS_VALUE,
            },
        )

    def _create_batch(self, creators: int, total: int) -> list[float]:
        """`total` creates split over `creators` processes, each with its own client and
        connection: threads in one process would queue for the GIL on the client's JSON and TLS
        work and measure the client, not kube-apiserver."""
        per = max(1, total // creators)
        jobs = [(str(self.cluster.kubeconfig), self.pods_path, per)] * creators
        return [s for part in self.pool.map(_creator, jobs) for s in part]

    def _clean(self) -> None:
        self.client.request(
            "DELETE",
            self.pods_path,
            query=[("gracePeriodSeconds", "0")],
            body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
        wait_until(
            lambda: not self.client.get(self.pods_path, query=[("limit", "1")]).get("items"),
            timeout=60,
            what="the batch's pods are gone",
        )

    def batch(self) -> tuple[dict[int, list[float]], Counters]:
        """One measured batch per creator count, each after unmeasured warm-up creates; and
        kube-apiserver's counters over the measured creates."""
        out = {}
        total = Counters()
        for creators in CREATORS:
            self._create_batch(creators, self.warmup)
            before = apiserver_counters(self.client)
            out[creators] = self._create_batch(creators, self.creates)
            total += apiserver_counters(self.client) - before
            self._clean()
        return out, total

    # Switching the arms -----------------------------------------------------------------------

    def _calls(self) -> float:
        """kube-apiserver's webhook calls so far, the preview hooks' left out: they are called for
        the dry-run probes only, never for the bench's creates."""
        text = self.client.get_text("/metrics")
        preview = sum(metric_sum(text, WEBHOOK_METRIC, {"name": name}) for name in PREVIEW_HOOKS)
        return metric_sum(text, WEBHOOK_METRIC, {}) - preview

    def _probe_pod(self) -> None:
        self.client.create(self.pods_path, pod_body(), dry_run=True)

    def register(self, policy: WebhookPolicy, plugin: bool) -> None:
        assert self.cluster.webhooks
        self.remove_floor()
        self.cluster.webhooks.register(policy)
        self.cluster.webhooks.probe(priority_plugin=plugin)

    def await_policy(self) -> None:
        """Wait until kube-apiserver's in-process policy resolves the bench's pod (its binding and
        the controller's table are read through informers): a dry run comes back with a priority
        and no mark, and calls no webhook."""

        def in_process() -> bool:
            before = self._calls()
            got = self.client.create(self.pods_path, pod_body(), dry_run=True)
            marked = MARKER_ANNOTATION in (got["metadata"].get("annotations") or {})
            return "priority" in got["spec"] and not marked and self._calls() == before

        wait_until(
            in_process, timeout=60, what="kube-apiserver resolves the bench's pod in process", interval=0.2
        )

    def apply_floor(self) -> None:
        for obj in floor_policy():
            create_or_replace(self.client, CONFIG_PATHS[obj["kind"]], obj)
        self.floor_applied = True

    def remove_floor(self) -> None:
        for obj in floor_policy() if self.floor_applied else ():
            delete_if_present(self.client, f"{CONFIG_PATHS[obj['kind']]}/{obj['metadata']['name']}")
        self.floor_applied = False

    def await_resolved(self) -> None:
        """Wait until a dry-run create of the bench's pod comes back with its priority."""
        wait_until(
            lambda: "priority" in self.client.create(self.pods_path, pod_body(), dry_run=True)["spec"],
            timeout=60,
            what="kube-apiserver gives the bench's pod its priority",
            interval=0.2,
        )

    def drop_policy(self) -> None:
        """Delete the in-process policy's binding and wait until the bench's pod is sent to the
        pod priority hook again (the policy no longer marks or resolves it)."""
        delete_if_present(self.client, f"{CONFIG_PATHS['MutatingAdmissionPolicyBinding']}/{POLICY_NAME}")

        def hooked() -> bool:
            before = self._calls()
            self._probe_pod()
            return self._calls() > before

        wait_until(hooked, timeout=60, what="kube-apiserver sends the bench's pod to the hook", interval=0.2)

    def restrict_a_class(self) -> None:
        class_access_arm.restrict_a_class(self.client, CLASS_VALUE + 1)

    def await_class_access(self, evaluated: bool) -> None:
        class_access_arm.await_evaluated(self.client, self.pods_path, pod_body(), evaluated)

    def drop_class_access(self) -> None:
        class_access_arm.drop_binding(self.client)
        self.await_class_access(evaluated=False)

    def await_preview(self, called: bool) -> None:
        """Until a dry-run create of the bench's pod is sent to the preview hook (registered), or
        five in a row are not (gone)."""
        name = {"name": preemption_preview.RULE_SET.name}
        streak = 0

        def settled() -> bool:
            nonlocal streak
            before = metric_sum(self.client.get_text("/metrics"), WEBHOOK_METRIC, name)
            self._probe_pod()
            seen = metric_sum(self.client.get_text("/metrics"), WEBHOOK_METRIC, name) > before
            streak = streak + 1 if seen is called else 0
            return streak >= (1 if called else 5)

        what = f"the preview hook is {'called' if called else 'no longer called'} for a dry run"
        wait_until(settled, timeout=60, what=what, interval=0.2)

    def unregister(self) -> None:
        """Delete the configurations and wait until a probe pod is no longer sent to any webhook:
        five dry-run creates in a row that add no webhook call."""
        assert self.cluster.webhooks
        self.remove_floor()
        self.cluster.webhooks.unregister()
        quiet = 0

        def no_calls() -> bool:
            nonlocal quiet
            before = self._calls()
            self._probe_pod()
            quiet = quiet + 1 if self._calls() == before else 0
            return quiet >= 5

        wait_until(
            no_calls, timeout=60, what="kube-apiserver calls no webhook for a pod create", interval=0.2
        )

    def restart(self, plugin: bool) -> None:
        seconds = self.cluster.restart_apiserver(ApiServerMode(priority_plugin=plugin))
        progress(
            f"kube-apiserver restarted with the Priority plugin "
            f"{'enabled' if plugin else 'disabled'} in {seconds:.1f} s"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--creates", type=int, default=400, help="measured creates per batch and creator count")
    p.add_argument("--warmup", type=int, default=48, help="unmeasured creates before each measured batch")
    p.add_argument("--rounds", type=int, default=6, help="batches per arm and mode (interleaved A B B A ...)")
    p.add_argument("--modes", default="kept,replaced", help="kept, replaced or both (kept,replaced)")
    p.add_argument("--webhook-workers", type=int, default=2)
    p.add_argument(
        "--enrolled",
        action="store_true",
        help="create the pods in a namespace enrolled for reservations (the pod quota hook is called)",
    )
    p.add_argument(
        "--hook-only",
        action="store_true",
        help="plugin replaced without the in-process policy: every pod goes through the pod priority hook",
    )
    p.add_argument(
        "--class-access",
        choices=("restricted", "none"),
        help="plugin kept: priogate with against without its class access policy, with one class "
        "restricted (its parameter exists) or none (it does not)",
    )
    p.add_argument(
        "--preview",
        action="store_true",
        help="priogate with against without its preemption preview hook (in each mode measured)",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="plugin replaced: a third arm, a constant in-process policy (the least any add-on can do)",
    )
    args = p.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"kept", "replaced"}:
        p.error("--modes takes kept, replaced or kept,replaced")
    kept_policy = WebhookPolicy.for_mode(priority_plugin=True)
    replaced_policy = WebhookPolicy.for_mode(priority_plugin=False)
    results: dict[str, Ratios] = {}
    with tempfile.TemporaryDirectory(prefix="priogate-bench-pod-create-") as tmp:
        # The controller runs in both arms (idle, it is only noise): with the plugin replaced it
        # keeps the PriorityClass table kube-apiserver resolves the common pod from.
        cluster = LocalCluster(
            Options(
                state_dir=Path(tmp),
                nodes=1,
                priority_plugin="kept" in modes,
                webhook_workers=args.webhook_workers,
            )
        )
        bench: Bench | None = None
        cluster.start()
        try:
            bench = Bench(cluster, args.creates, args.warmup, enrolled=args.enrolled)
            bench.setup()
            what = f"{args.creates} creates at each of {CREATORS} creators"
            if "kept" in modes:
                if not cluster.mode.priority_plugin:
                    bench.restart(True)
                kept_arms = arms.kept(bench, kept_policy, args.class_access, preview=args.preview)
                samples, counters = run_interleaved("plugin kept", args.rounds, kept_arms, bench.batch, what)
                results["plugin kept"] = report("plugin kept", samples, counters)["priogate"]
            if "replaced" in modes:
                replaced_arms = arms.replaced(
                    bench, replaced_policy, hook_only=args.hook_only, preview=args.preview, floor=args.floor
                )
                samples, counters = run_interleaved(
                    "plugin replaced", args.rounds, replaced_arms, bench.batch, what
                )
                results["plugin replaced"] = report("plugin replaced", samples, counters)["priogate"]
        finally:
            if bench is not None:
                bench.pool.shutdown()
            cluster.stop()
    mode = "plugin kept" if "plugin kept" in results else "plugin replaced"
    p50, p99 = results[mode][max(CREATORS)]
    print(f"pod create: p50 ratio {p50:.2f}, p99 ratio {p99:.2f} ({max(CREATORS)} creators, {mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
