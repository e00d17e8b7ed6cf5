"""`make bench-quota`: PodGroup admissions per second under contention, through the real control plane.

Starts the local control plane (binaries built by `make controlplane`), then two webhook servers
of two workers each behind a round-robin proxy, and creates PodGroups of cpu=1 with 32 requests
in flight against a quota that fits half of them. Every admission reads the namespace's ledger
and writes it with a resourceVersion precondition, so this measures the ledger under contention.
The last line:
    podgroups: N admissions/s under contention, over-admitted: 0
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from localcluster import LocalCluster, Options
from localcluster.binaries import REPO
from localcluster.procs import progress
from priogate.kube.client import load_client, resource_path
from priogate.scope import ENROLLED_LABEL, ENROLLED_VALUE
from tests.podgroup_load import create_concurrently
from tests.replicas import point_webhook, proxied, start_replicas


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--podgroups", type=int, default=400)
    p.add_argument("--in-flight", type=int, default=32)
    p.add_argument("--quota-cpu", type=int, default=200)
    p.add_argument("--keep-logs", type=Path, help="copy the components' logs here before stopping")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="priogate-bench-quota-") as tmp:
        cluster = LocalCluster(Options(state_dir=Path(tmp), nodes=1, webhook_workers=2))
        cluster.start()
        try:
            client = load_client(str(cluster.kubeconfig), pool_size=args.in_flight + 8)
            namespace = "bench-quota"
            # Enrolled (priogate.scope) as after its first claim: every admission measured goes
            # to the reservation hook, behind the proxy, not to the once-per-namespace enrolment.
            enrolled = {ENROLLED_LABEL: ENROLLED_VALUE}
            client.create("/api/v1/namespaces", {"metadata": {"name": namespace, "labels": enrolled}})
            client.create(
                resource_path("v1", "resourcequotas", namespace),
                {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": str(args.quota_cpu)}}},
            )
            replicas = start_replicas(
                cluster.supervisor,
                cluster.pki.webhook_crt,
                cluster.pki.webhook_key,
                cluster.kubeconfig,
                cluster.logs,
                masters=2,
                workers=2,
                ca_file=cluster.pki.ca_crt,
                repo=REPO,
                client_ca=cluster.webhook_client_ca,
                client_cert=cluster.webhook_client_cert,
            )
            with proxied([port for _, port in replicas]) as proxy:
                point_webhook(client, "podgroup-quota.priogate.io", proxy.url, "/validate/podgroups")
                progress(
                    f"creating {args.podgroups} PodGroups, {args.in_flight} in flight, "
                    f"quota cpu={args.quota_cpu}"
                )
                result = create_concurrently(client, namespace, args.podgroups, in_flight=args.in_flight)
        finally:
            cluster.stop()
            if args.keep_logs:
                shutil.copytree(cluster.logs, args.keep_logs, dirs_exist_ok=True)
                progress(f"logs kept in {args.keep_logs}")
    over = max(0, len(result.admitted) - args.quota_cpu)
    print(
        f"admitted {len(result.admitted)}, refused {sum(result.denials.values())}, "
        f"errors {len(result.errors)}, "
        f"in {result.seconds:.1f} s; most reserved seen: {result.max_ledger_cpu} cpu in the ledger, "
        f"{result.max_stored_cpu} cpu stored ({result.samples} samples)"
    )
    for error in result.errors[:5]:
        print(f"error: {error}", file=sys.stderr)
    print(f"podgroups: {result.rate:.0f} admissions/s under contention, over-admitted: {over}")
    return 0 if over == 0 and not result.errors else 1


if __name__ == "__main__":
    sys.exit(main())
