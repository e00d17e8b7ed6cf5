"""`make bench-ledger`: what one turn on a ledger costs the control plane, by the
ledger's size, through the real kube-apiserver and etcd.

A turn reads the ledger (GET) and writes it back (PUT with its resourceVersion), as
priogate.kube.ledger_store does for each batch of admissions. The ledger is built as priogate
writes it (priogate.ledger.codec.ledger_object, one entry per PodGroup of cpu=1) in priogate's own
namespace, and W watchers (threads of this process, each a watch on the ledgers decoding every
event, as each quota server worker and the controller do) hear every write. Prints, per ledger
size, the wall time of a turn and the CPU milliseconds per turn of each control-plane process and
of this process (the client and its watchers). kube-controller-manager shows up because its
ConfigMap informers hear every ledger write too.

    .venv/bin/python -m bench.ledger_turn [--turns 200] [--watchers 5] [--entries 0 100 400 2000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import tempfile
import threading
import time
import uuid
from pathlib import Path

from localcluster import LocalCluster, Options
from localcluster.procs import progress, tree_cpu_seconds
from priogate.kube import catalogue
from priogate.kube.client import ApiClient, load_client
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE, ledger_object, ledger_path
from priogate.ledger.model import Entry, Ledger, stamp


def _ledger(entries: int) -> Ledger:
    """As a namespace's groups make it: random uids, each group admitted at its own microsecond
    (the ledger is compressed, so entries alike would flatter it)."""
    rng = random.Random(entries)
    start = dt.datetime.now(dt.UTC)
    made = {}
    for i in range(entries):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        at = stamp(start - dt.timedelta(microseconds=rng.randrange(600_000_000)))
        made[uid] = Entry(f"bench-{i}", uid, {"cpu": "1"}, 1, "", at, 1)
    return Ledger(made)


class _Watcher(threading.Thread):
    """One watch on the ledgers, decoding every event; counts them, and keeps the error that
    ended it, so a watcher that died is reported rather than measured as one that heard
    nothing."""

    def __init__(self, client: ApiClient, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.client, self.stop, self.events = client, stop, 0
        self.error: BaseException | None = None

    def run(self) -> None:
        source = catalogue.LEDGERS
        try:
            for line in self.client.stream_lines(source.path, query=(*source.selectors, ("watch", "1"))):
                json.loads(line)
                self.events += 1
                if self.stop.is_set():
                    return
        except BaseException as e:  # reported by _check_heard
            self.error = e


def _check_heard(watchers: list[_Watcher], before: list[int], writes: int) -> None:
    for watcher, seen in zip(watchers, before, strict=True):
        heard = watcher.events - seen
        if watcher.error is not None or heard < writes:
            raise SystemExit(
                f"a watcher heard {heard} of {writes} ledger writes (error: {watcher.error!r}); "
                "the figures would not include the watchers, so none are printed"
            )


def _turns(client: ApiClient, namespace: str, turns: int) -> None:
    path = ledger_path(DEFAULT_LEDGER_NAMESPACE, namespace)
    for i in range(turns):
        current = client.get(path)
        current["data"]["charges.json"] = json.dumps({"turn": i})
        client.request("PUT", path, body=current)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=200)
    p.add_argument("--watchers", type=int, default=5)
    p.add_argument("--entries", type=int, nargs="+", default=[0, 100, 400, 2000])
    args = p.parse_args()
    lines = []
    with tempfile.TemporaryDirectory(prefix="priogate-bench-ledger-") as tmp:
        cluster = LocalCluster(Options(state_dir=Path(tmp), nodes=1, webhook=False, controller=False))
        cluster.start()
        stop = threading.Event()
        try:
            client = load_client(str(cluster.kubeconfig))
            pids = {proc.name: proc.pid for proc in cluster.supervisor.procs}
            watchers = [_Watcher(load_client(str(cluster.kubeconfig)), stop) for _ in range(args.watchers)]
            for watcher in watchers:
                watcher.start()
            for entries in args.entries:
                namespace = f"bench-{entries}"
                body = ledger_object(DEFAULT_LEDGER_NAMESPACE, namespace, _ledger(entries), None)
                client.create(ledger_path(DEFAULT_LEDGER_NAMESPACE), body)
                size = len(json.dumps(body))
                progress(f"{args.turns} turns on a ledger of {entries} entries ({size / 1024:.1f} KiB)")
                time.sleep(1)  # the create's watch events delivered
                before = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
                heard = [watcher.events for watcher in watchers]
                own, started = time.process_time(), time.monotonic()
                _turns(client, namespace, args.turns)
                wall = time.monotonic() - started
                time.sleep(1)  # the last writes' watch events delivered
                own = time.process_time() - own
                _check_heard(watchers, heard, args.turns)
                spent = {name: tree_cpu_seconds(pid) - before[name] for name, pid in pids.items()}
                parts = [
                    f"{name} {1000 * s / args.turns:.2f}" for name, s in sorted(spent.items()) if s >= 0.01
                ]
                per_turn = 1000 * wall / args.turns
                lines.append(
                    f"ledger of {entries} entries ({size / 1024:.1f} KiB): a turn takes {per_turn:.2f} ms; "
                    f"CPU ms per turn: {', '.join(parts)}, "
                    f"this process (client and {args.watchers} watchers) {1000 * own / args.turns:.2f}"
                )
        finally:
            stop.set()
            cluster.stop()
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
