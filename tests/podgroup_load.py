"""Many PodGroups created at once against a quota, and a watch on what is reserved meanwhile.

Shared by the e2e race test and `make bench-quota`: both must show that however many creates
are in flight, the admitted PodGroups' summed minResources never exceed the quota.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction

from priogate import api_json, podgroup
from priogate.kube.client import ApiClient, ApiError, resource_path
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, entries_of, ledger_name, ledger_path
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


Query = tuple[tuple[str, str], ...]
Fold = Callable[[str, dict], None]


class _Monitor:
    """Follows the stored PodGroups and the ledger with watches while the load runs: every state
    either goes through is seen (a poll would only sample them, and its LISTs of every group
    would load the API server it measures). The ledger's states are decoded once the load is
    done, in the order seen: decoding each write meanwhile took CPU from the machine measured."""

    def __init__(self, client: ApiClient, namespace: str, result: LoadResult) -> None:
        self.client, self.namespace, self.result = client, namespace, result
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._follow, args=(path, query, fold), name=name, daemon=True)
            for name, path, query, fold in (
                (
                    "podgroup-monitor",
                    resource_path(podgroup.GROUP_VERSION, podgroup.PLURAL, namespace),
                    (),
                    self._groups,
                ),
                (
                    "ledger-monitor",
                    ledger_path(DEFAULT_LEDGER_NAMESPACE),
                    (("fieldSelector", f"metadata.name={ledger_name(namespace)}"),),
                    self._ledger,
                ),
            )
        ]
        self.ledger_states: list[tuple[str, dict]] = []
        self.stored: dict[str, Fraction] = {}
        # Their sum, kept as events come: summing every group per event made the monitor's CPU
        # grow with the square of the groups, taken from the machine it measures.
        self.stored_total = Fraction(0)

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self, timeout: float) -> None:
        for thread in self.threads:
            thread.join(timeout)
        for kind, obj in self.ledger_states:
            self._ledger_state(kind, obj)

    def _groups(self, kind: str, obj: dict) -> None:
        uid = obj["metadata"]["uid"]
        self.stored_total -= self.stored.pop(uid, 0)
        if kind != "DELETED":
            self.stored[uid] = parse_quantity((obj["spec"].get("minResources") or {}).get("cpu", 0))
            self.stored_total += self.stored[uid]
        with self.lock:
            self.result.max_stored_cpu = max(self.result.max_stored_cpu, self.stored_total)
            self.result.samples += 1

    def _ledger(self, kind: str, obj: dict) -> None:
        with self.lock:
            self.ledger_states.append((kind, obj))

    def _ledger_state(self, kind: str, obj: dict) -> None:
        entries = entries_of(obj).values() if kind != "DELETED" else []
        cpu = sum((parse_quantity(e.min_resources.get("cpu", 0)) for e in entries), Fraction(0))
        with self.lock:
            self.result.max_ledger_cpu = max(self.result.max_ledger_cpu, cpu)
            self.result.samples += 1

    def _follow(self, path: str, query: Query, fold: Fold) -> None:
        try:
            self._watch(path, query, fold)
        except Exception as e:  # a monitor that stopped must not pass for one that saw nothing
            with self.lock:
                self.result.errors.append(f"monitor of {path}: {e!r}")

    def _watch(self, path: str, query: Query, fold: Fold) -> None:
        version = ""
        while True:
            if not version:  # first, or after the API server compacted past our version
                listed = self.client.get(path, query=list(query))
                for item in listed.get("items") or []:
                    fold("ADDED", item)
                version = listed["metadata"]["resourceVersion"]
            # Short watches, resumed from the last version seen, until the load is done; one
            # more after that catches the last events.
            last = self.done.is_set()
            watch = [*query, ("watch", "true"), ("resourceVersion", version), ("timeoutSeconds", "1")]
            for line in self.client.stream_lines(path, query=watch, timeout=(5, 10)):
                event = api_json.loads(line)
                if event["type"] == "ERROR":
                    version = ""
                    break
                if event["type"] != "BOOKMARK":
                    fold(event["type"], event["object"])
                version = event["object"]["metadata"]["resourceVersion"]
            if last and version:
                return


def create_concurrently(
    client: ApiClient,
    namespace: str,
    count: int,
    *,
    cpu: str = "1",
    in_flight: int = 32,
    prefix: str = "pg",
    monitor_client: ApiClient | None = None,
    on_created: Callable[[], None] | None = None,
) -> LoadResult:
    """`monitor_client`: who watches the ledger and the groups meanwhile, when `client` (a
    tenant) may not read the ledger. `on_created` is called once every create is answered,
    before the monitor's last watch and its decoding (a bench's measured window ends there)."""
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

    monitor = _Monitor(monitor_client or client, namespace, result)
    monitor.start()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        list(pool.map(create, range(count)))
    result.seconds = time.monotonic() - started
    if on_created is not None:
        on_created()
    monitor.done.set()
    monitor.join(15)
    return result
