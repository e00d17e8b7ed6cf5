"""The ClusterView rule sets read, over watch-backed caches. Derived values (the current
globalDefault class) are computed once per cache change, not per request."""

from __future__ import annotations

from collections.abc import Mapping

from priogate import priority
from priogate.kube.cache import WatchCache


class CacheView:
    def __init__(self, caches: Mapping[str, WatchCache]) -> None:
        self.caches = caches
        self._default_memo: tuple[int, Mapping | None] | None = None

    def priority_classes(self) -> Mapping[str, Mapping]:
        return self.caches["priorityclasses"].namespace("")

    def default_priority_class(self) -> Mapping | None:
        cache = self.caches["priorityclasses"]
        memo = self._default_memo
        generation = cache.generation
        if memo is None or memo[0] != generation:
            memo = (generation, priority.current_default(cache.namespace("").values()))
            self._default_memo = memo
        return memo[1]

    def unsynced(self, names: tuple[str, ...] | list[str]) -> list[str]:
        return [n for n in names if not self.caches[n].synced]
