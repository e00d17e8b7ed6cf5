"""Several webhook replicas behind one address, as a Service with several endpoints would be.

Any number of extra `python -m webhook` servers (gunicorn masters), each on a port of its own,
reached at one address in either of two ways: a round-robin TCP proxy on loopback (TLS passes
through, so every replica serves the same certificate), which counts the connections it hands
each replica (the e2e test of the ledger's race-freedom across replicas); or a port they all
also listen on with SO_REUSEPORT, where the kernel spreads connections among them with no
process in between, as kube-proxy's rules do among a Service's pods (`make bench-quota`: the
proxy's relaying took CPU and latency from the machine it measures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from localcluster import LocalCluster
from localcluster.api import metric_sum, update
from localcluster.binaries import REPO
from localcluster.procs import Proc, Supervisor, free_ports, wait_until
from priogate.kube.client import ApiClient
from tests.builders import podgroup
from webhook.registry import load_rule_sets

LOOPBACK = "127.0.0.1"
RELAYS = "priogate_ledger_relays_total"


class RoundRobinProxy:
    """Accepts TCP connections on a free loopback port and hands each to the next backend."""

    def __init__(self, backends: Sequence[int]) -> None:
        self.backends = list(backends)
        self.connections: Counter[int] = Counter()
        self.port = free_ports(1)[0]
        self._cycle = itertools.cycle(self.backends)
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()  # of open connections, closed at stop()
        self._thread = threading.Thread(target=self._run, name="round-robin-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def start(self) -> RoundRobinProxy:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the round-robin proxy did not start listening")
        return self

    def remove(self, backend: int) -> None:
        """Hand no new connection to `backend`, as a Service drops a pod that went away."""
        self.backends.remove(backend)
        self._cycle = itertools.cycle(self.backends)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, LOOPBACK, self.port))
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            # Connections still open (kube-apiserver keeps its webhook connections alive) have
            # their pipe tasks pending here. Left so, the interpreter reports each as "Task was
            # destroyed but it is pending!" at exit. Closing their transports ends each pipe with
            # an end of file, so every task finishes normally before the loop is closed
            # (cancelling instead trips Python 3.11's start_server callback, which calls
            # exception() on the cancelled task and logs a CancelledError per connection).
            for writer in self._writers:
                writer.close()
            pending = asyncio.all_tasks(self._loop)
            if pending:
                self._loop.run_until_complete(asyncio.wait(pending, timeout=5))
            self._loop.run_until_complete(server.wait_closed())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        backend = next(self._cycle)
        self.connections[backend] += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(LOOPBACK, backend)
        except OSError:
            client_writer.close()
            return
        writers = (client_writer, server_writer)
        self._writers.update(writers)
        try:
            await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))
        finally:
            self._writers.difference_update(writers)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        return  # the other side went away; closing below ends the peer pipe too
    finally:
        with contextlib.suppress(ConnectionError, RuntimeError):
            writer.close()


def start_replicas(
    supervisor: Supervisor,
    cert_file: Path,
    key_file: Path,
    kubeconfig: Path,
    log_dir: Path,
    *,
    masters: int,
    workers: int,
    ca_file: Path,
    repo: Path,
    client_ca: Path | None = None,
    client_cert: tuple[Path, Path] | None = None,
    shared_port: int | None = None,
    relay: bool = False,
) -> list[tuple[Proc, int]]:
    """Start `masters` webhook servers of `workers` workers each; wait until all are ready.
    `client_ca`: they require client certificates signed by it, `client_cert` one of them (mTLS,
    LocalCluster.webhook_client_ca and webhook_client_cert). `shared_port`: each also listens
    there, with SO_REUSEPORT. `relay`: each names its own port as its peer address, so ledger
    admissions are relayed to the namespace's writer (webhook/ledger_relay.py). Returns each
    server with its own port."""
    import requests

    ports = [port for port in free_ports(masters + 1) if port != shared_port][:masters]
    started = []
    for i, port in enumerate(ports):
        cmd = [
            sys.executable,
            "-m",
            "webhook",
            f"--cert-file={cert_file}",
            f"--key-file={key_file}",
            f"--bind={LOOPBACK}:{port}" + (f",{LOOPBACK}:{shared_port}" if shared_port else ""),
            *(["--reuse-port"] if shared_port else []),
            *([f"--peer-address={LOOPBACK}:{port}"] if relay else []),
            f"--kubeconfig={kubeconfig}",
            f"--workers={workers}",
            *([f"--client-ca-file={client_ca}"] if client_ca else []),
        ]
        # A temporary directory of its own, as each pod has (an emptyDir).
        tmp = log_dir / f"webhook-replica-{i}.tmp"
        tmp.mkdir(exist_ok=True)
        proc = supervisor.start(
            f"webhook-replica-{i}",
            cmd,
            log_dir / f"webhook-replica-{i}.log",
            cwd=repo,
            env={"TMPDIR": str(tmp)},
        )
        started.append((proc, port))
    session = requests.Session()
    session.trust_env = False
    if client_cert is not None:
        session.cert = (str(client_cert[0]), str(client_cert[1]))
    for proc, port in started:
        wait_until(
            lambda port=port: _ready(session, port, ca_file),
            timeout=60,
            what=f"replica on :{port} is ready",
            proc=proc,
        )
    return started


def cluster_replicas(
    cluster: LocalCluster, masters: int, workers: int, *, relay: bool, shared_port: int | None = None
) -> list[tuple[Proc, int]]:
    """start_replicas beside a LocalCluster's own webhook, with its certificates, requiring
    kube-apiserver's client certificate as the cluster's webhook does (relaying replicas present
    the serving certificate to each other, webhook/ledger_relay.py)."""
    return start_replicas(
        cluster.supervisor,
        cluster.pki.webhook_crt,
        cluster.pki.webhook_key,
        cluster.kubeconfig,
        cluster.logs,
        masters=masters,
        workers=workers,
        ca_file=cluster.pki.ca_crt,
        repo=REPO,
        client_ca=cluster.webhook_client_ca,
        client_cert=cluster.webhook_client_cert,
        shared_port=shared_port,
        relay=relay,
    )


def relay_settled(cluster: LocalCluster, client: ApiClient, path: str, ports: Sequence[int]) -> float:
    """The relays the replicas on `ports` have answered, once a dry-run PodGroup claim at `path`
    (a namespace whose ledger was just written) has been relayed to the ledger's writer: each
    replica's cache then names it. Claims go several at once: the proxy hands out connections,
    not requests, and claims sent one at a time share kube-apiserver's one connection."""
    total = [0.0]

    def claim(i: int) -> None:
        body = podgroup(f"relayed-{i}", namespace=None, min_member=1, min_resources={"cpu": "1"})
        client.create(path, body, dry_run=True)

    def relayed() -> bool:
        threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        client_cert = cluster.webhook_client_cert
        total[0] = sum(
            server_metric(port, RELAYS, {"outcome": "answered"}, cluster.pki.ca_crt, client_cert)
            for port in ports
        )
        return total[0] > 0

    wait_until(relayed, timeout=60, what="a dry-run claim is relayed to the ledger's writer", interval=0.05)
    return total[0]


def _ready(session: object, port: int, ca_file: Path) -> bool:
    try:
        return (
            session.get(f"https://{LOOPBACK}:{port}/readyz", verify=str(ca_file), timeout=3).status_code
            == 200
        )
    except OSError:
        return False


def served_count(port: int, hook: str, ca_file: Path, client_cert: tuple[Path, Path] | None = None) -> float:
    """How many requests of `hook` the server on `port` has answered (its own metrics)."""
    return server_metric(port, "priogate_webhook_requests_total", {"webhook": hook}, ca_file, client_cert)


def server_metric(
    port: int,
    name: str,
    labels: dict[str, str],
    ca_file: Path,
    client_cert: tuple[Path, Path] | None = None,
) -> float:
    """The sum of metric `name`'s samples with `labels` on the server on `port`."""
    import requests

    session = requests.Session()
    session.trust_env = False
    session.cert = (str(client_cert[0]), str(client_cert[1])) if client_cert else None
    text = session.get(f"https://{LOOPBACK}:{port}/metrics", verify=str(ca_file), timeout=5).text
    return metric_sum(text, name, labels)


@contextlib.contextmanager
def proxied(backends: Sequence[int]) -> Iterator[RoundRobinProxy]:
    proxy = RoundRobinProxy(backends).start()
    try:
        yield proxy
    finally:
        proxy.stop()


HOOKS_PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/priogate"
MUTATING_HOOKS_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/priogate"


def edit_hooks(client: ApiClient, change: Callable[[list[dict]], list[dict]]) -> None:
    """Replace priogate's validating hooks with `change(hooks)`. Retried on 409: a PUT must carry
    the resourceVersion it read."""
    update(client, HOOKS_PATH, lambda config: config.update(webhooks=change(config["webhooks"])))


def point_webhook(client: ApiClient, hook_name: str, url: str, path: str) -> None:
    """Send the validating webhook `hook_name` to `url` + `path` (as if its Service moved)."""

    def moved(hooks: list[dict]) -> list[dict]:
        for hook in hooks:
            if hook["name"] == hook_name:
                hook["clientConfig"]["url"] = url + path
        return hooks

    edit_hooks(client, moved)


def point_quota_server(client: ApiClient, url: str) -> None:
    """Send every hook the quota server answers (the rule sets of server "quota", mutating and
    validating) to `url`, as manifests/ sends them all to the quota container of each pod."""
    paths = {rule_set.name: rule_set.path for rule_set in load_rule_sets(servers=("quota",))}

    def moved(config: dict) -> None:
        for hook in config["webhooks"]:
            if hook["name"] in paths:
                hook["clientConfig"]["url"] = url + paths[hook["name"]]

    for path in (MUTATING_HOOKS_PATH, HOOKS_PATH):
        update(client, path, moved)
