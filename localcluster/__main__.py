"""`python -m localcluster run|up|down|status|build`: the local control plane with priogate inside.

run     build if needed, start everything, serve in the foreground until Ctrl-C
up      the same in the background; returns once the webhooks answer (.local/kubeconfig)
down    stop exactly what `up` started, by pid, in reverse order
status  print the recorded state of a cluster started with `up`
build   only build the binaries (the first build compiles Kubernetes: 10-40 minutes)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from localcluster.binaries import REPO, BuildFailed, ensure_binaries
from localcluster.cluster import LocalCluster
from localcluster.options import PREEMPTORS, Options
from localcluster.procs import ComponentFailed, log_tail, process_start_time, progress, running, stop_pid

STATE_FILE = "state.json"


class Stop(Exception):
    pass


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def _options(args: argparse.Namespace) -> Options:
    return Options(
        state_dir=args.state_dir,
        nodes=args.nodes,
        node_cpu=args.node_cpu,
        node_memory=args.node_memory,
        node_pods=args.node_pods,
        priority_plugin=args.keep_priority_plugin,
        preemption_preview=args.preemption_preview,
        webhook=not args.no_webhook,
        webhook_workers=args.workers,
        mtls=not args.no_mtls,
        controller=not args.no_controller,
        preemptor=args.preemptor,
        unschedulable_flush_s=args.unschedulable_flush,
        real_node=args.real_node,
    )


def _write_state(state_dir: Path, state: dict) -> None:
    tmp = state_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(state_dir / STATE_FILE)


def _read_state(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _alive(record: dict) -> bool:
    return running(record["pid"], record.get("start_time"))


def _summary(cluster: LocalCluster) -> str:
    t = cluster.timings
    mem = cluster.memory_kib()
    lines = [
        f"control plane up in {t.get('warm-start', 0):.1f} s (etcd {t.get('etcd', 0):.1f} s, "
        f"kube-apiserver {t.get('kube-apiserver', 0):.1f} s, controllers {t.get('controllers', 0):.1f} s, "
        f"nodes {t.get('nodes', 0):.1f} s, webhook {t.get('webhook', 0):.1f} s)",
        "memory (VmRSS): " + ", ".join(f"{k} {v / 1024:.0f} MiB" for k, v in mem.items()),
        f"total {sum(mem.values()) / 1024:.0f} MiB",
        f"export KUBECONFIG={cluster.kubeconfig}",
    ]
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    previous = _read_state(state_dir)
    if previous and _alive(previous["launcher"]):
        print(
            f"a local cluster is already running (launcher pid {previous['launcher']['pid']}); "
            "stop it with `make down` first",
            file=sys.stderr,
        )
        return 1
    cluster = LocalCluster(_options(args))
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    me = {"pid": os.getpid(), "start_time": process_start_time(os.getpid())}
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        _write_state(state_dir, {"launcher": me, "ready": False})
        cluster.start()
        _write_state(state_dir, {"launcher": me, "ready": True, **cluster.state()})
        print(_summary(cluster), flush=True)
        if not args.background:
            print("serving; press Ctrl-C to stop everything", flush=True)
        while True:
            dead = cluster.dead()
            if dead:
                p = dead[0]
                raise ComponentFailed(f"{p.name} exited unexpectedly:\n{log_tail(p.log)}")
            time.sleep(1)
    except Stop as s:
        progress(f"{s}: stopping")
        return 0
    except (ComponentFailed, BuildFailed) as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"component logs are in {cluster.logs}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        cluster.stop()
        with contextlib.suppress(FileNotFoundError):
            (state_dir / STATE_FILE).unlink()
        progress("stopped")


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    previous = _read_state(state_dir)
    if previous and _alive(previous["launcher"]):
        print(
            f"already up (launcher pid {previous['launcher']['pid']}); KUBECONFIG={state_dir / 'kubeconfig'}"
        )
        return 0
    # Build in the foreground, so its progress shows here.
    ensure_binaries()
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "launcher.log"
    argv = [sys.executable, "-m", "localcluster", "run", "--background", *args.passthrough]
    with log.open("wb") as f:
        child = subprocess.Popen(
            argv,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    progress(f"launcher started in the background (pid {child.pid}, log {log})")
    shown = 0
    deadline = time.monotonic() + args.timeout
    while True:
        text = log.read_text(errors="replace")
        for line in text[shown:].splitlines(keepends=True):
            if line.endswith("\n"):
                sys.stderr.write(line)
                shown += len(line)
        state = _read_state(state_dir)
        if state and state.get("ready") and state["launcher"]["pid"] == child.pid:
            print(f"up; export KUBECONFIG={state['kubeconfig']}; stop with `make down`")
            return 0
        if child.poll() is not None:
            print(f"error: the launcher exited with code {child.returncode}; see {log}", file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            print(f"error: not up after {args.timeout:.0f} s; stopping it. See {log}", file=sys.stderr)
            stop_pid(child.pid, process_start_time(child.pid), 60)
            return 1
        time.sleep(0.3)


def cmd_down(args: argparse.Namespace) -> int:
    state_dir: Path = args.state_dir
    state = _read_state(state_dir)
    if state is None:
        print(f"nothing to stop: no {state_dir / STATE_FILE}")
        return 0
    launcher = state["launcher"]
    if _alive(launcher):
        progress(f"stopping the launcher (pid {launcher['pid']}); it stops the components in reverse order")
        stop_pid(launcher["pid"], launcher["start_time"], grace=90)
    # Whatever the launcher could not stop (it was killed, or timed out): by recorded pid only.
    for record in reversed(state.get("components", [])):
        if _alive(record):
            progress(f"stopping {record['name']} (pid {record['pid']}) left behind by the launcher")
            stop_pid(record["pid"], record["start_time"], grace=15)
    etcd_data = state.get("etcd_data")
    if etcd_data and Path(etcd_data).exists():
        shutil.rmtree(etcd_data, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (state_dir / STATE_FILE).unlink()
    print("down")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = _read_state(args.state_dir)
    if state is None:
        print("not running")
        return 1
    for record in [state["launcher"] | {"name": "launcher"}, *state.get("components", [])]:
        print(f"{record['name']:<24} pid {record['pid']:<8} {'running' if _alive(record) else 'GONE'}")
    print(json.dumps({k: state.get(k) for k in ("kubeconfig", "server", "timings_s", "rss_kib")}, indent=2))
    return 0


def cmd_build(_args: argparse.Namespace) -> int:
    print(ensure_binaries())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["run", "up", "down", "status", "build"])
    p.add_argument(
        "--state-dir", type=Path, default=REPO / ".local", help="kubeconfig, certificates, logs, pids"
    )
    p.add_argument("--nodes", type=int, default=3, help="fake kwok nodes")
    p.add_argument("--node-cpu", default="8")
    p.add_argument("--node-memory", default="32Gi")
    p.add_argument("--node-pods", type=int, default=110)
    p.add_argument(
        "--keep-priority-plugin",
        action="store_true",
        help="keep kube-apiserver's built-in Priority admission plugin (see docs/modes.md)",
    )
    p.add_argument(
        "--preemption-preview",
        action="store_true",
        help="register the preemption preview hook: dry-run creates that need preemption are warned"
        " (docs/priorityclass-policy.md)",
    )
    p.add_argument("--no-webhook", action="store_true", help="control plane only")
    p.add_argument("--no-controller", action="store_true", help="do not start the priogate controller")
    p.add_argument("--workers", type=int, default=2, help="webhook (gunicorn) worker processes")
    p.add_argument(
        "--no-mtls",
        action="store_true",
        help="the webhook takes any TLS client; by default it requires kube-apiserver's client"
        " certificate (docs/hardening.md)",
    )
    p.add_argument(
        "--preemptor",
        choices=PREEMPTORS,
        default="kube-scheduler",
        help="who shapes single-pod preemption: kube-scheduler (its DefaultPreemption alone; priogate"
        " only for gangs; the default) or priogate (kube-scheduler runs manifests/scheduler/'s"
        " profile, DefaultPreemption with priogate's preempt extender, and the controller serves it"
        " with --pod-preemption on loopback)",
    )
    p.add_argument(
        "--unschedulable-flush",
        type=float,
        metavar="SECONDS",
        help="kube-scheduler retries a pod left in its unschedulable pool after this long without an"
        " event (its --pod-max-in-unschedulable-pods-duration; default: kube-scheduler's 5 min)",
    )
    p.add_argument(
        "--real-node",
        action="store_true",
        help="also run a real node (containerd + kubelet, pods on a CNI bridge; needs root) beside the"
        " kwok ones: containers start (docs/image-and-node.md)",
    )
    p.add_argument("--timeout", type=float, default=300, help="up: seconds to wait until the webhooks answer")
    p.add_argument("--background", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    # `up` re-runs itself as `run` in the background with the same cluster options.
    args.passthrough = [
        f"--state-dir={args.state_dir.resolve()}",
        f"--nodes={args.nodes}",
        f"--node-cpu={args.node_cpu}",
        f"--node-memory={args.node_memory}",
        f"--node-pods={args.node_pods}",
        f"--workers={args.workers}",
        f"--preemptor={args.preemptor}",
        *(
            [f"--unschedulable-flush={args.unschedulable_flush}"]
            if args.unschedulable_flush is not None
            else []
        ),
        *(["--keep-priority-plugin"] if args.keep_priority_plugin else []),
        *(["--preemption-preview"] if args.preemption_preview else []),
        *(["--no-webhook"] if args.no_webhook else []),
        *(["--no-mtls"] if args.no_mtls else []),
        *(["--no-controller"] if args.no_controller else []),
        *(["--real-node"] if args.real_node else []),
    ]
    try:
        return {"run": cmd_run, "up": cmd_up, "down": cmd_down, "status": cmd_status, "build": cmd_build}[
            args.command
        ](args)
    except BuildFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
