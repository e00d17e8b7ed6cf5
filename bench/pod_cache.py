"""`make bench-pod-cache`: memory of the quota server's pods cache, whole pods against what
it keeps (PodGroup members only, and only the fields the quota check reads).

Pods are realistic Deployment pods (~4 KB of JSON each); a share of them belongs to PodGroups.
The last line:
    pods cache: N pods (M in PodGroups): X MiB whole, Y MiB kept
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tracemalloc

from bench.webhook import realistic_pod
from priogate import podgroup
from priogate.kube.cache import WatchCache
from webhook.view import group_member_essentials


def pods(count: int, member_share: float) -> list[dict]:
    template = realistic_pod()
    members = int(count * member_share)
    out = []
    for i in range(count):
        # Through JSON, as from the API server: no structure shared between pods.
        pod = json.loads(json.dumps(template))
        pod["metadata"].update(name=f"web-{i}", uid=f"uid-{i}", resourceVersion=str(i))
        if i < members:
            pod["metadata"].setdefault("annotations", {})[podgroup.GROUP_ANNOTATION] = f"gang-{i % 50}"
        out.append(pod)
    return out


def cache_bytes(objects: list[dict], transform: object) -> int:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = WatchCache.static("pods", [])
    cache.transform = transform  # type: ignore[assignment]
    cache.replace_all(copy.copy(objects), "1")
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert cache.synced
    return after - before


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--member-share", type=float, default=0.05)
    args = p.parse_args()
    print(f"building {args.pods:,} pods ...", file=sys.stderr)
    # Whole pods: measure the objects themselves as the cache would hold them (decoded JSON).
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    objects = pods(args.pods, args.member_share)
    whole = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    kept = cache_bytes(objects, group_member_essentials)
    members = int(args.pods * args.member_share)
    mib = 1024 * 1024
    print(
        f"pods cache: {args.pods:,} pods ({members:,} in PodGroups): "
        f"{whole / mib:.1f} MiB whole, {kept / mib:.1f} MiB kept"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
