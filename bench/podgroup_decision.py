"""The PodGroup quota hook's decision at scale, in CPU time, no API server: the rule's handler
(webhook.rules.podgroup_quota.admit) over an in-process ledger (MemoryLedgerStore) and static
caches, admitting G PodGroups of cpu=1 one after another in one namespace under a quota that
fits them all. Prints CPU microseconds per admission over the first and the last tenth, so the
growth with the ledger's size shows; then the CPU milliseconds to read (ledger_of, its entries
parsed before) and to write (ledger_object) the final ledger as the ConfigMap a turn GETs and PUTs;
then the CPU milliseconds to have the cached groups' claims again (ClusterView.stored_podgroups,
which every decision reads) after one of G stored groups changed; then a refusal's what-if check
(the claim without two of the entries) summed afresh and on a fork of the running sums.

    .venv/bin/python -m bench.podgroup_decision [--groups 2000]
"""

from __future__ import annotations

import argparse
import json
import time

import orjson

from priogate.ledger.codec import ledger_object, ledger_of
from priogate.ledger.memory import MemoryLedgerStore
from priogate.ledger.totals import EntryTotals
from tests.builders import SYSTEM_CLASSES, cpu_podgroup, resource_quota
from tests.reviews import group_review, make_view
from webhook.review import parse_review
from webhook.rules import podgroup_quota

NAMESPACE = "team-a"


def _review(i: int) -> bytes:
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": f"g{i}", "namespace": NAMESPACE, "uid": f"uid-{i:08d}", "generation": 1},
        "spec": {"minMember": 1, "minResources": {"cpu": "1"}, "priorityClassName": ""},
    }
    return orjson.dumps(group_review(group))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=2000)
    args = p.parse_args()
    store = MemoryLedgerStore()
    quota = resource_quota("compute", hard={"cpu": str(args.groups)}, namespace=NAMESPACE)
    view = make_view(list(SYSTEM_CLASSES), quotas=[quota], ledger_store=store)
    spent: list[float] = []
    for i in range(args.groups):
        request = parse_review(_review(i))
        start = time.process_time()
        decision = podgroup_quota.admit(request, view)
        spent.append(time.process_time() - start)
        if not decision.allowed:
            raise SystemExit(f"error: group {i} was refused: {decision.message}")
    tenth = max(1, args.groups // 10)
    first, last = sum(spent[:tenth]) / tenth, sum(spent[-tenth:]) / tenth
    print(
        f"podgroup decision: {first * 1e6:.0f} us CPU per admission over the first {tenth} groups, "
        f"{last * 1e6:.0f} us over the last {tenth} ({args.groups} groups in one namespace's ledger)"
    )
    _ledger_costs(store)
    _stored_claims_cost(args.groups)
    _what_if_cost(store)
    return 0


def _what_if_cost(store: MemoryLedgerStore, rounds: int = 100) -> None:
    """A refusal in a turn asks whether the claim would fit without some entries (or with them
    settled): summed on a fork of the ledger's running sums, against summing afresh."""
    entries = dict(store.ledgers[NAMESPACE].entries)
    totals = EntryTotals()
    totals.others(entries, "")
    what_if = dict(list(entries.items())[2:])
    for name, sums in (("afresh", EntryTotals), ("on a fork", totals.fork)):
        start = time.process_time()
        for _ in range(rounds):
            sums().others(what_if, "")
        spent = (time.process_time() - start) / rounds
        print(f"what-if check over {len(entries)} entries, summed {name}: {spent * 1e6:.0f} us CPU")


def _stored_claims_cost(groups: int, rounds: int = 200) -> None:
    def stored(i: int, cpu: str, version: int) -> dict:
        return cpu_podgroup(f"g{i}", cpu, namespace=NAMESPACE, resource_version=str(version))

    view = make_view(podgroups=[stored(i, "1", i) for i in range(groups)])
    view.stored_podgroups(NAMESPACE)
    cache = view.caches["podgroups"]
    start = time.process_time()
    for i in range(rounds):
        cache.apply_event("MODIFIED", stored(i % groups, "2", groups + i))
        view.stored_podgroups(NAMESPACE)
    spent = (time.process_time() - start) / rounds
    print(f"cached groups' claims after one of {groups} changed: {spent * 1e3:.2f} ms CPU")


def _ledger_costs(store: MemoryLedgerStore, rounds: int = 50) -> None:
    ledger = store.ledgers[NAMESPACE]
    stored = json.loads(json.dumps(ledger_object("priogate-system", NAMESPACE, ledger, "1")))
    ledger_of(stored)  # a turn's read finds the entries parsed by the turns before it
    start = time.process_time()
    for _ in range(rounds):
        ledger_of(stored)
    read = (time.process_time() - start) / rounds
    start = time.process_time()
    for _ in range(rounds):
        ledger_object("priogate-system", NAMESPACE, ledger, "1")
    written = (time.process_time() - start) / rounds
    size = len(json.dumps(stored))
    print(
        f"ledger of {len(ledger.entries)} entries ({size / 1024:.0f} KiB): read {read * 1e3:.2f} ms CPU, "
        f"written {written * 1e3:.2f} ms CPU"
    )


if __name__ == "__main__":
    raise SystemExit(main())
