"""Many PodGroups created at once against a quota, and a watch on what is reserved meanwhile.

Shared by the e2e race test and `make bench-quota`: both must show that however many creates
are in flight, the admitted PodGroups' summed minResources never exceed the quota.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction

from priogate import podgroup
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.ledger import DEFAULT_LEDGER_NAMESPACE, entries_of, record_path
from priogate.resources import parse_quantity


@dataclass
class LoadResult:
    admitted: list[str] = field(default_factory=list)
    denials: Counter[str] = field(default_factory=Counter)  # first words of each denial reason
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    max_stored_cpu: Fraction = Fraction(0)  # most summed minResources.cpu seen among stored groups
    max_ledger_cpu: Fraction = Fraction(0)
    samples: int = 0

    @property
    def rate(self) -> float:
        return (len(self.admitted) + sum(self.denials.values())) / self.seconds if self.seconds else 0.0


def _group(name: str, cpu: str) -> dict:
    return {
        "apiVersion": podgroup.GROUP_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 1, "minResources": {"cpu": cpu}},
    }


class _Monitor(threading.Thread):
    """Samples the stored PodGroups and the ledger while the load runs."""

    def __init__(self, client: ApiClient, namespace: str, result: LoadResult) -> None:
        super().__init__(name="reservation-monitor", daemon=True)
        self.client, self.namespace, self.result = client, namespace, result
        self.done = threading.Event()

    def run(self) -> None:
        groups = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, self.namespace)
        ledger = record_path(DEFAULT_LEDGER_NAMESPACE, self.namespace)
        while not self.done.is_set():
            stored = self.client.get(groups).get("items") or []
            cpu = sum(
                (parse_quantity((g["spec"].get("minResources") or {}).get("cpu", 0)) for g in stored),
                Fraction(0),
            )
            self.result.max_stored_cpu = max(self.result.max_stored_cpu, cpu)
            try:
                entries = entries_of(self.client.get(ledger)).values()
            except ApiError as e:
                if e.status != 404:
                    raise
                entries = []
            cpu = sum((parse_quantity(e.min_resources.get("cpu", 0)) for e in entries), Fraction(0))
            self.result.max_ledger_cpu = max(self.result.max_ledger_cpu, cpu)
            self.result.samples += 1
            self.done.wait(0.05)


def create_concurrently(
    client: ApiClient, namespace: str, count: int, *, cpu: str = "1", in_flight: int = 32, prefix: str = "pg"
) -> LoadResult:
    result = LoadResult()
    path = resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace)
    lock = threading.Lock()

    def create(i: int) -> None:
        name = f"{prefix}-{i:04d}"
        try:
            client.create(path, _group(name, cpu))
        except ApiError as e:
            with lock:
                if e.status == 403 and "exceeded quota" in e.message:
                    result.denials["exceeded quota"] += 1
                else:
                    result.errors.append(f"{name}: {e}")
            return
        with lock:
            result.admitted.append(name)

    monitor = _Monitor(client, namespace, result)
    monitor.start()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        list(pool.map(create, range(count)))
    result.seconds = time.monotonic() - started
    monitor.done.set()
    monitor.join(10)
    return result
