"""`python -m bench.preview_state`: what the preemption preview holds and takes in one worker of
the server that answers it (webhook/preview_state.py), on bench.preemption's synthetic cluster
(30 pods a node, nearly full, so the preview's pod needs victims).

It measures the engine's state the first preview builds from the caches (memory held, by
tracemalloc, apart from the caches themselves), the first preview (which builds it), and later
previews, each after a pod event queued by the watch. The last line:
    preview: N nodes, M pods: state X MiB, first preview A s, next previews B ms (median)
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
import tracemalloc

from bench.synthetic_cluster import synthetic_cluster
from priogate.kube.cache import WatchCache
from priogate.preemption_preview import pending, warning
from priogate.slim import slim_node, slim_pod
from webhook.preview_state import PREVIEW_CACHES, PreviewState

KIND_CACHE = {
    "Node": "nodes",
    "Pod": "preemption-pods",
    "PodGroup": "podgroups",
    "PodDisruptionBudget": "pdbs",
    "PriorityClass": "priorityclasses",
}
TRANSFORMS = {"nodes": slim_node, "preemption-pods": slim_pod}


def caches_of(objects: list[dict]) -> dict[str, WatchCache]:
    by_cache: dict[str, list[dict]] = {name: [] for name in PREVIEW_CACHES}
    for obj in objects:
        by_cache[KIND_CACHE[obj["kind"]]].append(obj)
    caches = {}
    for name, items in by_cache.items():
        cache = WatchCache.static(name, [])
        cache.transform = TRANSFORMS.get(name)
        cache.replace_all(items, "1")
        caches[name] = cache
    return caches


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--runs", type=int, default=7)
    args = p.parse_args()
    objects = synthetic_cluster(args.nodes)
    preemptor = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "urgent")
    objects.remove(preemptor)
    caches = caches_of(objects)
    state = PreviewState.attach(caches)
    ask = pending(preemptor, "Pod", preemptor["metadata"]["namespace"], "2026-01-02T00:00:00Z")
    pods = len(caches["preemption-pods"].items())

    # Memory on a state of its own: tracemalloc slows what it traces, so the timings are not its.
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    traced = PreviewState(caches)
    traced.decide("Pod", ask, time.time())
    gc.collect()
    held = (tracemalloc.get_traced_memory()[0] - before) / (1024 * 1024)
    tracemalloc.stop()
    del traced
    gc.collect()
    t0 = time.perf_counter()
    first = state.decide("Pod", ask, time.time())
    first_seconds = time.perf_counter() - t0
    assert first is not None
    print(f"first preview: {warning(first)}", file=sys.stderr)

    bound = next(o for o in caches["preemption-pods"].items() if o["spec"].get("nodeName"))
    later = []
    for i in range(args.runs):
        moved = copy.deepcopy(dict(bound))
        moved["metadata"] = {**moved["metadata"], "resourceVersion": str(100 + i)}
        moved["status"] = {**moved.get("status", {}), "phase": "Running"}
        caches["preemption-pods"].apply_event("MODIFIED", moved)
        t0 = time.perf_counter()
        state.decide("Pod", ask, time.time())
        later.append(time.perf_counter() - t0)
    print(
        f"preview: {args.nodes} nodes, {pods} pods: state {held:.1f} MiB, first preview "
        f"{first_seconds:.2f} s, next previews {statistics.median(later) * 1000:.1f} ms (median)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
