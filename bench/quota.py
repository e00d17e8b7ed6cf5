"""`make bench-quota`: PodGroup admissions per second under contention, through the real control plane.

Starts the local control plane (binaries built by `make controlplane`), then two webhook servers
of one worker each (`--quota-workers`; each server with a temporary directory of its own, as
each pod has) that share one port with SO_REUSEPORT, so the kernel spreads kube-apiserver's
connections among them as a Service's rules spread them among pods (a relaying proxy in this
process took CPU and latency from the machine measured). As manifests/ deploys priogate, every
quota rule set is sent to them (each pod's quota container), and the cluster's own webhook is
restarted to answer only the priority rule sets (each pod's priority container). It creates
PodGroups of cpu=1 with 32 requests in flight against a quota that fits half of them. Every
admission reads the namespace's ledger and writes it with a resourceVersion precondition, so
this measures the ledger under contention.

Each round has three runs in the same cluster, each in fresh namespaces, the cluster quiet
before each. The baseline: the same creates with priogate's quota hooks taken out of the webhook
configuration, what this machine's control plane does without the ledger (everything else, the
controller included, as in the measured run). The floor: the quota hooks still out, and in their
place one validating hook, to the same servers at the same address, whose rule answers at once
(podgroup-annotations': no read, no write): what any validating webhook on this stack costs,
which no ledger design can beat. It admits every group, so it stores twice as many as the
measured run. Then the measured run. A run lasts a second or two on a fast machine, so one run
is mostly noise: the figures are each arm's median over `--rounds` (3), and every round's rates
are printed too. The CPU seconds each component used while the creates ran are printed for each
median run (the load generator is this process: its creating threads and the monitor), and
kube-apiserver's requests per admission in the measured one (the ledgers' GETs and PUTs, those
lost to a conflict, the quota LISTs), and how many reservation-hook requests each server
answered (the kernel spreads connections, not requests; the bench fails if a server answered
none). `--one-server` adds a fourth run to each round: the quota hooks sent to one of the two servers
only, so one process takes every turn on each ledger and batches all of a namespace's waiting
admissions into one write; what one owner per namespace would reach, beside the two servers
racing each other for the same ledger as deployed. The last line:
    podgroups: N admissions/s under contention (baseline without the quota hooks B/s, with a hook
    that answers at once F/s), over-admitted: 0
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.quota_hooks import (
    QUOTA_HOOKS,
    covered,
    create_namespace,
    create_quota,
    prepare,
    set_floor_hook,
    set_quota_hooks,
)
from localcluster import LocalCluster, Options
from localcluster.procs import free_ports, pin_tree, progress, tree_cpu_seconds, wait_until
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from tests.podgroup_load import LoadResult, create_concurrently
from tests.replicas import LOOPBACK, cluster_replicas, point_quota_server, served_count, server_metric

RELAYS = "priogate_ledger_relays_total"


@dataclass
class Run:
    result: LoadResult
    cpu: dict[str, float]  # component -> CPU seconds during the run
    # (verb, resource, code) -> requests kube-apiserver answered during the run
    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def per_admission(self) -> str:
        """The requests the quota hooks add, per admission: the ledgers' reads and writes (the
        run's ConfigMap traffic: only the ledgers are ConfigMaps here) and the quota LISTs."""
        n = len(self.result.admitted) + sum(self.result.denials.values()) or 1

        def count(verb: str, resource: str, code: str | None = None) -> float:
            return sum(
                c
                for (v, r, k), c in self.requests.items()
                if v == verb and r == resource and code in (None, k)
            )

        return (
            f"kube-apiserver requests per admission: ledger GET {count('GET', 'configmaps') / n:.2f}, "
            f"ledger PUT {count('PUT', 'configmaps') / n:.2f} (lost to a conflict: "
            f"{count('PUT', 'configmaps', '409') / n:.2f}), "
            f"quota LIST {count('LIST', 'resourcequotas') / n:.2f}"
        )

    def beyond(self, other: Run) -> str:
        """The kube-apiserver requests this run made beyond `other`'s, per create, the largest
        first: what the quota hooks and what follows from them (the controller's writes) cost."""
        n = _creates(self)
        extra = Counter(
            {
                key: self.requests[key] / n - other.requests.get(key, 0) / _creates(other)
                for key in self.requests
            }
        )
        top = [(key, v) for key, v in extra.most_common(8) if v >= 0.01]
        return ", ".join(f"{verb} {resource} {code} {v:.2f}" for (verb, resource, code), v in top)

    def summary(self, what: str) -> str:
        r = self.result
        busy = sorted((name, seconds) for name, seconds in self.cpu.items() if seconds >= 0.05)
        spent = ", ".join(f"{name} {seconds:.1f}" for name, seconds in busy)
        return (
            f"{what}: {r.rate:.0f}/s; admitted {len(r.admitted)}, refused {sum(r.denials.values())}, "
            f"errors {len(r.errors)}, in {r.seconds:.1f} s; CPU seconds: {spent}"
        )


# The control plane and priogate are quiet when all of them together use less than this share of
# one core over a SETTLE_WINDOW_SECONDS window.
QUIET_SHARE = 0.15
SETTLE_WINDOW_SECONDS = 0.5


def _settle(pids: dict[str, int], after: str) -> None:
    """Wait until the components are quiet, so a run never pays for the one before it (the
    controller moving the baseline's 400 groups through their phases, with a status write and
    an Event each, took CPU from the measured run that followed it at once)."""

    def quiet() -> bool:
        before = sum(tree_cpu_seconds(pid) for pid in pids.values())
        time.sleep(SETTLE_WINDOW_SECONDS)
        spent = sum(tree_cpu_seconds(pid) for pid in pids.values()) - before
        return spent < QUIET_SHARE * SETTLE_WINDOW_SECONDS

    waited = wait_until(quiet, timeout=60, what=f"the cluster is quiet after {after}", interval=0)
    progress(f"the cluster was quiet {waited:.1f} s after {after}")


def _requests(client: ApiClient) -> Counter[tuple[str, str, str]]:
    """kube-apiserver's apiserver_request_total, by (verb, resource, code)."""
    out: Counter[tuple[str, str, str]] = Counter()
    for family in text_string_to_metric_families(client.get_text("/metrics")):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                labels = sample.labels
                out[(labels.get("verb", ""), labels.get("resource", ""), labels.get("code", ""))] += (
                    sample.value
                )
    return out


def _load(client: ApiClient, namespace: str, args: argparse.Namespace, pids: dict[str, int]) -> Run:
    requests_before = _requests(client)
    before = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
    own = time.process_time()  # this process's threads: the creates and the monitor's watches
    cpu: dict[str, float] = {}

    def created() -> None:  # the window ends with the last create's answer
        cpu.update({name: tree_cpu_seconds(pid) - before[name] for name, pid in pids.items()})
        cpu["load generator"] = time.process_time() - own

    result = create_concurrently(
        client, namespace, args.podgroups, in_flight=args.in_flight, on_created=created
    )
    requests = _requests(client)
    requests.subtract(requests_before)
    return Run(result, cpu, +requests)


def _creates(run: Run) -> int:
    return len(run.result.admitted) + sum(run.result.denials.values()) or 1


CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def _pin_apart(pids: dict[str, int]) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    half = len(cpus) // 2
    control_plane, rest = set(cpus[:half]), set(cpus[half:])
    for name, pid in pids.items():
        pin_tree(pid, control_plane if name in CONTROL_PLANE else rest)
    pin_tree(os.getpid(), rest)
    progress(f"pinned: the control plane on CPUs {sorted(control_plane)}, the rest on {sorted(rest)}")


def _median(runs: list[Run]) -> Run:
    """The run of median rate (the lower middle of an even count)."""
    return sorted(runs, key=lambda run: run.result.rate)[(len(runs) - 1) // 2]


def _ratios(arms: dict[str, list[Run]], arm: str) -> str:
    """Each round's rate over the same round's floor, and their median: the floor moves with the
    machine from round to round, so a ratio within a round compares like with like."""
    ratios = sorted(m.result.rate / f.result.rate for m, f in zip(arms[arm], arms["floor"], strict=True))
    listed = ", ".join(f"{r:.2f}" for r in ratios)
    return f"{listed} (median {ratios[(len(ratios) - 1) // 2]:.2f})"


def _rates(runs: list[Run]) -> str:
    return ", ".join(f"{run.result.rate:.0f}" for run in runs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--podgroups", type=int, default=400)
    p.add_argument("--in-flight", type=int, default=32)
    p.add_argument("--quota-cpu", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3, help="rounds of the three runs; medians reported")
    p.add_argument("--keep-logs", type=Path, help="copy the components' logs here before stopping")
    p.add_argument(
        "--quota-workers", type=int, default=1, help="worker processes of each quota server (deployed: 1)"
    )
    p.add_argument(
        "--one-server",
        action="store_true",
        help="a fourth run per round: the quota hooks sent to one of the two servers only, so one "
        "process writes each namespace's ledger (what one owner per namespace would reach)",
    )
    p.add_argument(
        "--relay",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the servers relay ledger admissions to the namespace's writer, as deployed (--no-relay:"
        " they race for the ledger, as replicas without --peer-address do)",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) on"
        " half of the CPUs, priogate and the load generator on the other half, as in a cluster whose"
        " control plane has nodes of its own",
    )
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    arms: dict[str, list[Run]] = {"baseline": [], "floor": [], "measured": [], "one server": []}
    with tempfile.TemporaryDirectory(prefix="priogate-bench-quota-") as tmp:
        cluster = LocalCluster(Options(state_dir=Path(tmp), nodes=1, webhook_workers=2))
        cluster.start()
        try:
            client = load_client(str(cluster.kubeconfig), pool_size=args.in_flight + 8)
            shared_port = free_ports(1)[0]
            client_cert = cluster.webhook_client_cert
            replicas = cluster_replicas(
                cluster, 2, args.quota_workers, relay=args.relay, shared_port=shared_port
            )
            replicas_url = f"https://{LOOPBACK}:{shared_port}"
            # As manifests/ deploys priogate: every quota rule set (PodGroup defaults, annotations,
            # reservations, enrolment, pod quota, quota fences) on the two quota servers, and the
            # cluster's own webhook answering only the priority rule sets, as a pod's priority
            # container does. Serving both, it also kept caches of every PodGroup and ledger,
            # two more watchers of everything measured than any deployment has.
            point_quota_server(client, replicas_url)
            cluster.restart_webhook("--serve=priority")
            pids = {proc.name: proc.pid for proc in cluster.supervisor.procs}
            if args.pin:
                _pin_apart(pids)
            one = OneServer(client, replicas, replicas_url, cluster.pki.ca_crt, client_cert)
            for i in range(1, args.rounds + 1):
                runs = _round(client, args, pids, replicas_url, f"{i}")
                if args.one_server:
                    runs["one server"] = one.run(args, pids, f"{i}")
                for arm, run in runs.items():
                    arms[arm].append(run)
                progress(
                    f"round {i}/{args.rounds}: with the quota hooks {runs['measured'].result.rate:.0f}/s, "
                    f"baseline {runs['baseline'].result.rate:.0f}/s, floor {runs['floor'].result.rate:.0f}/s"
                )
            # The kernel spreads connections, not requests: show that both servers took part.
            ports = [port for _, port in replicas]
            served = [served_count(port, QUOTA_HOOKS[0], cluster.pki.ca_crt, client_cert) for port in ports]
            relayed = [
                server_metric(port, RELAYS, {"outcome": "answered"}, cluster.pki.ca_crt, client_cert)
                for port in ports
            ]
        finally:
            cluster.stop()
            if args.keep_logs:
                shutil.copytree(cluster.logs, args.keep_logs, dirs_exist_ok=True)
                progress(f"logs kept in {args.keep_logs}")
    over = max(max(0, len(run.result.admitted) - args.quota_cpu) for run in arms["measured"])
    errors = [e for arm in ("measured", "floor") for run in arms[arm] for e in run.result.errors]
    measured, baseline, floor = (_median(arms[arm]) for arm in ("measured", "baseline", "floor"))
    print(
        f"rounds: with the quota hooks {_rates(arms['measured'])}/s; baseline {_rates(arms['baseline'])}/s; "
        f"floor {_rates(arms['floor'])}/s"
    )
    print(measured.summary("with the quota hooks, median round"))
    print(f"each round's ratio to its own floor: {_ratios(arms, 'measured')}")
    print(measured.per_admission())
    print(f"kube-apiserver requests per create beyond the floor's: {measured.beyond(floor)}")
    counts = ", ".join(f"{n:.0f}" for n in served)
    print(f"reservation hook requests answered by each server, all rounds: {counts}")
    print(f"ledger admissions relayed to the writer by each server: {', '.join(f'{n:.0f}' for n in relayed)}")
    result = measured.result
    print(
        f"most reserved seen: {result.max_ledger_cpu} cpu in the ledger, "
        f"{result.max_stored_cpu} cpu stored ({result.samples} states watched)"
    )
    print(baseline.summary("baseline, median round"))
    print(floor.summary("floor, a hook that answers at once, median round"))
    if args.one_server:
        alone = _median(arms["one server"])
        over = max(over, *(max(0, len(run.result.admitted) - args.quota_cpu) for run in arms["one server"]))
        errors += [e for run in arms["one server"] for e in run.result.errors]
        print(f"one server: {_rates(arms['one server'])}/s over the rounds")
        print(alone.summary("one server, median round"))
        print(alone.per_admission())
        print(f"each round's ratio to its own floor, one server: {_ratios(arms, 'one server')}")
    if min(served) == 0:
        errors.append("a server answered no reservation hook request: the kernel gave it no connection")
    for error in errors[:5]:
        print(f"error: {error}", file=sys.stderr)
    print(
        f"podgroups: {result.rate:.0f} admissions/s under contention "
        f"(baseline without the quota hooks {baseline.result.rate:.0f}/s, "
        f"with a hook that answers at once {floor.result.rate:.0f}/s), over-admitted: {over}"
    )
    return 0 if over == 0 and not errors else 1


class OneServer:
    """The quota hooks sent to the first server alone (its own port, not the shared one), for one
    run, then back to both."""

    def __init__(
        self,
        client: ApiClient,
        replicas: list[tuple[Any, int]],
        shared_url: str,
        ca_file: Path,
        client_cert: tuple[Path, Path] | None,
    ) -> None:
        self.client, self.shared_url = client, shared_url
        self.ports = [port for _, port in replicas]
        self.ca_file, self.client_cert = ca_file, client_cert

    def _served(self) -> list[float]:
        return [served_count(port, QUOTA_HOOKS[0], self.ca_file, self.client_cert) for port in self.ports]

    def _relayed(self) -> float:
        return server_metric(self.ports[0], RELAYS, {}, self.ca_file, self.client_cert)

    def _only_first_answers(self, namespace: str) -> bool:
        """Four probes through kube-apiserver, all answered by the first server."""
        before = self._served()
        for _ in range(4):
            covered(self.client, namespace)
        after = self._served()
        return after[0] - before[0] == 4 and after[1:] == before[1:]

    def run(self, args: argparse.Namespace, pids: dict[str, int], tag: str) -> Run:
        namespace = f"bench-one-server-{tag}"
        create_namespace(self.client, namespace)
        point_quota_server(self.client, f"https://{LOOPBACK}:{self.ports[0]}")
        try:
            wait_until(
                lambda: self._only_first_answers(namespace),
                timeout=30,
                what="kube-apiserver to send the quota hooks to one server",
            )
            # Only now: the quota's fence turn makes the first server the ledger's writer. Made
            # while both servers answered, it could go to the other, and the first would relay
            # every admission to it.
            create_quota(self.client, namespace, args.quota_cpu)
            _settle(pids, "pointing the quota hooks at one server")
            progress(f"round {tag}: one server, {args.podgroups} PodGroups")
            relayed = self._relayed()
            run = _load(self.client, namespace, args, pids)
            if self._relayed() != relayed:
                raise SystemExit(f"round {tag}, one server: it relayed admissions, so two servers took them")
        finally:
            point_quota_server(self.client, self.shared_url)
        self.client.request("DELETE", resource_path(GROUP_VERSION, PLURAL, namespace))
        _settle(pids, f"round {tag}, one server")
        return run


def _round(
    client: ApiClient, args: argparse.Namespace, pids: dict[str, int], url: str, tag: str
) -> dict[str, Run]:
    """One round: the baseline, the floor and the measured run, each in fresh namespaces, the
    cluster quiet before each; the round's PodGroups deleted after it."""
    namespaces = {arm: f"bench-{arm}-{tag}" for arm in ("baseline", "floor", "measured")}
    for namespace in namespaces.values():
        prepare(client, namespace, args.quota_cpu)
    progress(f"round {tag}: baseline, {args.podgroups} PodGroups without priogate's quota hooks")
    hooks = set_quota_hooks(client, None, namespaces["measured"])
    _settle(pids, "taking the quota hooks out")
    runs = {"baseline": _load(client, namespaces["baseline"], args, pids)}
    _settle(pids, "the baseline")
    progress(f"round {tag}: floor, {args.podgroups} PodGroups through a hook that answers at once")
    set_floor_hook(client, hooks, url, namespaces["floor"])
    runs["floor"] = _load(client, namespaces["floor"], args, pids)
    set_floor_hook(client, hooks, None, namespaces["floor"])
    set_quota_hooks(client, hooks, namespaces["measured"])
    _settle(pids, "the floor")
    progress(
        f"round {tag}: {args.podgroups} PodGroups, {args.in_flight} in flight, quota cpu={args.quota_cpu}"
    )
    runs["measured"] = _load(client, namespaces["measured"], args, pids)
    for namespace in namespaces.values():
        client.request("DELETE", resource_path(GROUP_VERSION, PLURAL, namespace))
    _settle(pids, f"round {tag}")
    return runs


if __name__ == "__main__":
    sys.exit(main())
