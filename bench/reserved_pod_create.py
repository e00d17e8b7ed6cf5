"""`make bench-reserved-pod`: pod CREATE latency through the real kube-apiserver in a namespace
that holds a PodGroup reservation (so every pod takes a turn on the namespace's ledger in the pod
quota hook), while 4 threads create ConfigMaps in another namespace: the write load that makes a
consistent LIST of an idle kind, such as ResourceQuotas, wait for etcd's next progress
notification (KEP-2340). Prints p50, p90 and the mean of N sequential creates.

    .venv/bin/python -m bench.reserved_pod_create [--pods 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from localcluster import LocalCluster, Options
from localcluster.procs import progress
from priogate.kube.client import ApiClient, load_client, resource_path
from priogate.podgroup import GROUP_VERSION, PLURAL
from tests.builders import pod

NAMESPACE, BUSY = "bench-reserved", "bench-busy"
WRITERS = 4


def _prepare(client: ApiClient) -> None:
    for name in (NAMESPACE, BUSY):
        client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    client.create(
        resource_path("v1", "resourcequotas", NAMESPACE),
        {"metadata": {"name": "compute"}, "spec": {"hard": {"cpu": "1000"}}},
    )
    group = {"apiVersion": GROUP_VERSION, "kind": "PodGroup", "metadata": {"name": "gang"}}
    group["spec"] = {"minMember": 1, "minResources": {"cpu": "10"}}
    client.create(resource_path(GROUP_VERSION, PLURAL, NAMESPACE), group)


def _write_load(client: ApiClient, stop: threading.Event, writer: int) -> None:
    path, n = resource_path("v1", "configmaps", BUSY), 0
    while not stop.is_set():
        n += 1
        client.create(path, {"metadata": {"name": f"w{writer}-{n}"}, "data": {"x": "y"}})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=40)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="priogate-bench-reserved-pod-") as tmp:
        cluster = LocalCluster(Options(state_dir=Path(tmp), nodes=1))
        cluster.start()
        try:
            client = load_client(str(cluster.kubeconfig), pool_size=WRITERS + 4)
            _prepare(client)
            time.sleep(2)  # the webhook's caches hear of the quota and the group
            stop = threading.Event()
            writers = [threading.Thread(target=_write_load, args=(client, stop, i)) for i in range(WRITERS)]
            for t in writers:
                t.start()
            progress(f"creating {args.pods} pods one after another, {WRITERS} ConfigMap writers elsewhere")
            spent = []
            try:
                for i in range(args.pods):
                    body = pod(f"p{i}", namespace=None, cpu="10m", node="bench-nowhere")
                    started = time.perf_counter()
                    client.create(resource_path("v1", "pods", NAMESPACE), body)
                    spent.append((time.perf_counter() - started) * 1e3)
            finally:
                stop.set()
                for t in writers:
                    t.join(10)
        finally:
            cluster.stop()
    spent.sort()
    print(
        f"pod create with a reservation in the namespace, {WRITERS} writers elsewhere: "
        f"p50 {spent[len(spent) // 2]:.1f} ms, p90 {spent[int(len(spent) * 0.9)]:.1f} ms, "
        f"mean {statistics.mean(spent):.1f} ms ({len(spent)} pods)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
