"""`make bench-pod-cache`: memory of the pods caches, whole pods against what they keep: the
quota server's (PodGroup members only, and only the fields the quota check reads) and the
controller's (every pod, without the fields it never reads).

Pods are realistic Deployment pods (bench.webhook.realistic_pod); a share of them belongs to PodGroups.
The last line:
    pods cache: N pods (M in PodGroups): X MiB whole, controller Y MiB, quota server Z MiB
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from typing import Any

from bench.webhook import realistic_pod
from priogate import podgroup
from priogate.kube.cache import WatchCache
from priogate.slim import group_member_essentials, slim_pod


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


def cache_bytes(count: int, member_share: float, transform: Any) -> int:
    """Memory held by a cache of `count` pods once the decoded originals are gone: kept parts
    share structure with the originals, so only this counts what a cache really holds."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache = WatchCache.static("pods", [])
    cache.transform = transform
    cache.replace_all(pods(count, member_share), "1")
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert cache.synced
    return held


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=20000)
    p.add_argument("--member-share", type=float, default=0.05)
    args = p.parse_args()
    mib = 1024 * 1024
    figures = {}
    for label, transform in (
        ("whole pods", None),
        ("controller (unread fields dropped)", slim_pod),
        ("quota server (PodGroup members' essentials)", group_member_essentials),
    ):
        print(f"caching {args.pods:,} pods: {label} ...", file=sys.stderr)
        figures[label] = cache_bytes(args.pods, args.member_share, transform) / mib
        print(f"  {figures[label]:.1f} MiB", file=sys.stderr)
    members = int(args.pods * args.member_share)
    whole, controller, quota = figures.values()
    print(
        f"pods cache: {args.pods:,} pods ({members:,} in PodGroups): {whole:.1f} MiB whole, "
        f"controller {controller:.1f} MiB, quota server {quota:.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
