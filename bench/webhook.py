"""`make bench-webhook`: the real gunicorn server over TLS, driven by wrk over keep-alive connections.

The priority server as manifests/ deploys it (`--serve priority`: gunicorn's asyncio worker, its
admissions answered on the event loop), with one worker process pinned to CPU 0 and wrk pinned
to CPU 1, so the figure is per worker core.
The body is a realistic ~4 KB Pod AdmissionReview. Several runs, because a shared 2-core machine
swings by a third from minute to minute; the last line is the median run:
    mutate/pods: N admissions/s, p50 X ms, p99 Y ms
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.builders import SYSTEM_CLASSES, priority_class
from tests.reviews import review
from tests.serving import start_server
from webhook.registry import SERVERS

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BENCH_BODY"), "r")
wrk.body = f:read("*a")
f:close()
"""


def realistic_pod() -> dict:
    """A Deployment-made pod: 3 containers, env, probes, volumes; about 4 KB as JSON."""
    containers = []
    for i, name in enumerate(["app", "sidecar-proxy", "log-shipper"]):
        containers.append(
            {
                "name": name,
                "image": f"registry.example.invalid/team/{name}:v1.{i}.7",
                "ports": [{"containerPort": 8080 + i, "protocol": "TCP"}],
                "env": [{"name": f"SETTING_{j}", "value": f"value-{j}-{'x' * 12}"} for j in range(10)],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 + i}, "periodSeconds": 10},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "web-7d9f8b6c5d-",
            "namespace": "team-a",
            "labels": {"app": "web", "pod-template-hash": "7d9f8b6c5d", "tier": "frontend"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9f8b6c5d",
                    "uid": "5a3e1a52-9d9e-4a43-9a0f-5f1b3c2d4e6f",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": containers,
            "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
            "priorityClassName": "high",
            "serviceAccountName": "web",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
            ],
        },
    }


def in_process_cost(body: bytes, classes: list[dict], rounds: int = 5, n: int = 3000) -> tuple[float, float]:
    """Microseconds per admission through the WSGI app without a server (best of `rounds`), next
    to a bare Flask route that only reads the body: steadier than wall-clock throughput on a
    shared machine, and it separates priogate's own cost from the framework's."""
    import io

    from flask import Flask, Response, request

    from tests.reviews import make_app

    bare = Flask("bare")

    @bare.post("/")
    def _read_only() -> Response:
        request.get_data(cache=False)
        return Response("{}", mimetype="application/json")

    def environ(path: str) -> dict:
        return {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "https",
            "SERVER_NAME": "bench",
            "SERVER_PORT": "8443",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.errors": sys.stderr,
        }

    def best(app: Flask, path: str) -> float:
        def start_response(*_: object) -> None:
            return None

        fastest = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(n):
                b"".join(app(environ(path), start_response))
            fastest = min(fastest, (time.perf_counter() - started) / n * 1e6)
        return fastest

    return best(bare, "/"), best(make_app(classes), "/mutate/pods")


def parse_wrk(output: str) -> tuple[float, float, float]:
    """requests/s, p50 ms, p99 ms from `wrk --latency` output."""

    def ms(label: str) -> float:
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
        if not m:
            raise ValueError(f"wrk printed no {label}% latency:\n{output}")
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if not rate:
        raise ValueError(f"wrk printed no Requests/sec:\n{output}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if errors:
        raise RuntimeError(f"{errors.group(1)} requests failed:\n{output}")
    return float(rate.group(1)), ms("50"), ms("99")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=10, help="seconds per run")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument(
        "--threads",
        type=int,
        default=SERVERS["priority"],
        help="the app's threads per worker, which the priority admissions do not use (default: as deployed)",
    )
    p.add_argument("--rounds", type=int, default=3, help="measured runs; the median run is the headline")
    p.add_argument(
        "--profile",
        type=Path,
        help="also sample the worker with py-spy during the first run (only while it holds the GIL) "
        "and write its collapsed stacks here; prints the functions that hold it longest",
    )
    args = p.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed: apt-get install -y wrk (Debian's package), or `make bench-webhook`")
    if args.profile and not shutil.which("py-spy"):
        sys.exit(
            "--profile needs py-spy on PATH (a PyPI package with its own binary), e.g. "
            "python3 -m pip install --target /tmp/py-spy py-spy && PATH=/tmp/py-spy/bin:$PATH"
        )
    body = review(realistic_pod())
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="priogate-bench-") as tmp:
        body_file, lua = Path(tmp) / "body.json", Path(tmp) / "post.lua"
        body_file.write_text(json.dumps(body))
        lua.write_text(LUA)
        print(f"body: {body_file.stat().st_size} bytes AdmissionReview", file=sys.stderr)
        classes = [
            *SYSTEM_CLASSES,
            priority_class("high", value=1000),
            priority_class("low", value=10, default=True),
        ]
        floor_us, priogate_us = in_process_cost(body_file.read_bytes(), classes)
        cpus = os.cpu_count() or 1
        server = start_server(
            Path(tmp) / "server",
            classes,
            workers=1,
            threads=args.threads,
            serve="priority",
            cpu_list="0" if cpus > 1 else None,
        )
        try:
            cmd = [
                "wrk",
                "-t1",
                f"-c{args.connections}",
                "-d2s",
                "--latency",
                "-s",
                str(lua),
                server.url + "/mutate/pods",
            ]
            if cpus > 1:
                cmd = ["taskset", "-c", "1", *cmd]
            env = {**os.environ, "BENCH_BODY": str(body_file)}
            print("warming up (2 s) ...", file=sys.stderr)
            subprocess.run(cmd, env=env, check=True, capture_output=True)
            cmd[cmd.index("-d2s")] = f"-d{args.duration}s"
            worker = _worker_pid(server.process.pid)
            runs, cpu_per_admission = [], []
            for i in range(args.rounds):
                print(
                    f"run {i + 1}/{args.rounds}: {args.duration} s, {args.connections} keep-alive "
                    f"connections, 1 worker ...",
                    file=sys.stderr,
                )
                cpu_before, waited_before = _cpu_seconds(worker), _cpu_wait_seconds(worker)
                spy = _start_profile(worker, args.profile, args.duration) if args.profile and i == 0 else None
                out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
                if spy is not None:
                    spy.wait()
                cpu_per_admission.append((_cpu_seconds(worker) - cpu_before) / _requests(out) * 1e6)
                runs.append(parse_wrk(out))
                cpu = cpu_per_admission[-1]
                waited = (_cpu_wait_seconds(worker) - waited_before) / args.duration
                print(
                    f"  {figures(*runs[-1])}; worker CPU {cpu:.0f} us/admission; the worker waited for "
                    f"its CPU {waited:.0%} of the run (other processes on it)",
                    file=sys.stderr,
                )
        finally:
            server.stop()
    rate, p50, p99 = sorted(runs)[len(runs) // 2]
    print(f"machine: {cpus} cores, {platform_summary()}")
    print(f"load average (1 min): {load_before:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(
        f"in process, per admission: {priogate_us:.0f} us "
        f"(a bare Flask route reading the body: {floor_us:.0f} us)"
    )
    cpu_us = sorted(cpu_per_admission)[len(cpu_per_admission) // 2]
    print(
        f"server CPU per admission (worker process, all threads): {cpu_us:.0f} us (runs: "
        f"{', '.join(f'{c:.0f}' for c in cpu_per_admission)}), so {1e6 / cpu_us:,.0f} admissions/s "
        "per fully used core"
    )
    print(f"runs (admissions/s): {', '.join(f'{r[0]:,.0f}' for r in runs)}; the median run follows")
    if args.profile:
        _print_profile(args.profile)
    print(f"mutate/pods: {figures(rate, p50, p99)}")
    return 0


def _start_profile(pid: int, out: Path, duration: int) -> subprocess.Popen:
    """py-spy on the worker for the middle of a run. --gil: only samples where a thread holds the
    GIL, which is what bounds a worker (a thread waiting in a socket or for the GIL costs none)."""
    cmd = ["py-spy", "record", "--pid", str(pid), "--gil", "--threads", "--nonblocking"]
    cmd += ["--rate", "250", "--format", "raw", "--duration", str(max(1, duration - 2)), "--output", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _print_profile(path: Path, top: int = 25) -> None:
    """Share of GIL-holding samples per function, inclusive (the function or what it calls)."""
    from collections import Counter

    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = {f for f in stack.split(";") if not f.startswith("thread (")}
        total += int(count)
        for frame in frames:
            inclusive[re.sub(r"\(.*/(site-packages|python3\.\d+)/", "(", frame)] += int(count)
    print(f"profile ({total} samples holding the GIL; {path}), inclusive share:")
    for frame, count in inclusive.most_common(top):
        print(f"  {100 * count / max(1, total):5.1f}% {frame}")


def _worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"expected one gunicorn worker under pid {master}, found {children}")
    return int(children[0])


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc: what the worker itself spent,
    unlike wall-clock throughput, which other processes on a shared machine also move."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_wait_seconds(pid: int) -> float:
    """Time the process's threads spent runnable but waiting for a CPU (/proc schedstat): on a
    shared machine, how much of the run another process had the worker's core; latency then
    grows with it whatever the server does."""
    tasks = Path(f"/proc/{pid}/task").iterdir()
    return sum(int((t / "schedstat").read_text().split()[1]) for t in tasks) / 1e9


def _requests(wrk_output: str) -> int:
    m = re.search(r"(\d+) requests in", wrk_output)
    if not m:
        raise ValueError(f"wrk printed no request count:\n{wrk_output}")
    return int(m.group(1))


def figures(rate: float, p50: float, p99: float) -> str:
    return f"{rate:,.0f} admissions/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms"


def platform_summary() -> str:
    import platform

    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        m = re.search(r"model name\s*:\s*(.+)", cpuinfo.read_text())
        model = m.group(1).strip() if m else ""
    return f"{model or platform.processor()}, Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
