"""Process supervision: start components with their own log files, remember them by pid, stop
them in reverse order (SIGTERM, then SIGKILL after a grace period), never by name.

Each child gets its own session, so a Ctrl-C in the terminal reaches only the launcher, which
then stops the children in order. On Linux each child also gets PR_SET_PDEATHSIG, so a launcher
killed with SIGKILL does not leave components running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PR_SET_PDEATHSIG = 1


def progress(message: str) -> None:
    print(f">> {message}", file=sys.stderr, flush=True)


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together, so no two are the same)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return  # not glibc Linux: the reverse-order stop still applies, only the safety net is missing


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): with the pid it identifies one process,
    so a recycled pid is never mistaken for a component."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def running(pid: int, start_time: str | None) -> bool:
    """The process started as (pid, start_time) still runs (a zombie does not count: when the
    launcher's parent is gone, an init that does not reap leaves it as one)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start_time and fields[0] != "Z"


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children(pid: int) -> Sequence[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def pin_tree(pid: int, cpus: set[int]) -> None:
    """Keep every thread of a process and of its children on `cpus` (threads and processes
    started later inherit it from the thread that starts them)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
    for child in children(pid):
        pin_tree(child, cpus)


def tree_cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its children still running (a gunicorn master and its
    workers), from /proc; 0 for a process gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(tree_cpu_seconds(int(child)) for child in children)


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


class ComponentFailed(RuntimeError):
    pass


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]
    start_time: str | None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def failure(self, what: str) -> ComponentFailed:
        code = self.popen.poll()
        state = "is running" if code is None else f"exited with code {code}"
        return ComponentFailed(
            f"{self.name} {state} but {what}.\n--- last lines of {self.log} ---\n{log_tail(self.log)}\n"
            f"--- end of {self.name} log; the full command line is the first line of that file ---"
        )

    def record(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.pid, "start_time": self.start_time, "exe": self.argv[0]}


class Supervisor:
    """The components started so far, in start order."""

    def __init__(self) -> None:
        self.procs: list[Proc] = []

    def start(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as f:
            f.write(("$ " + " ".join(argv) + "\n").encode())
            f.flush()
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=None if env is None else {**os.environ, **env},
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # only prctl(), safe between fork and exec
            )
        proc = Proc(name, list(argv), log, popen, process_start_time(popen.pid))
        self.procs.append(proc)
        return proc

    def restart(self, name: str, argv: Sequence[str], grace: float = 15.0) -> Proc:
        """Stop one component and start it again with `argv`, in the same place of the stop order."""
        old = self.get(name)
        index = self.procs.index(old)
        self.stop(name, grace)
        proc = self.start(name, argv, old.log)
        self.procs.remove(proc)
        self.procs.insert(index, proc)
        return proc

    def get(self, name: str) -> Proc:
        for p in self.procs:
            if p.name == name:
                return p
        raise KeyError(f"no component named {name!r} was started")

    def stop(self, name: str, grace: float = 15.0) -> None:
        proc = self.get(name)
        stop_pid(proc.pid, proc.start_time, grace, popen=proc.popen)
        self.procs.remove(proc)

    def stop_all(self, grace: float = 15.0) -> None:
        for proc in reversed(list(self.procs)):
            progress(f"stopping {proc.name} (pid {proc.pid})")
            stop_pid(proc.pid, proc.start_time, grace, popen=proc.popen)
            self.procs.remove(proc)


def stop_pid(
    pid: int, start_time: str | None, grace: float, popen: subprocess.Popen[bytes] | None = None
) -> bool:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL. Only when the pid is still the process
    that was started (same start time). Returns True when a process was signalled."""
    if popen is not None and popen.poll() is not None:
        return False
    if start_time is not None and process_start_time(pid) != start_time:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if _gone(pid, start_time, popen):
            return True
        time.sleep(0.1)
    progress(f"pid {pid} did not stop within {grace:.0f} s of SIGTERM; sending SIGKILL")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not _gone(pid, start_time, popen):
        time.sleep(0.1)
    return True


def _gone(pid: int, start_time: str | None, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None:
        return popen.poll() is not None
    return not running(pid, start_time)


def wait_until(
    check: Callable[[], bool], *, timeout: float, what: str, proc: Proc | None = None, interval: float = 0.25
) -> float:
    """Poll `check` until it returns True; fail early when `proc` dies. Returns the seconds waited."""
    t0 = time.monotonic()
    last_error: Exception | None = None
    while True:
        if proc is not None and not proc.alive():
            raise proc.failure(f"exited while waiting until {what}")
        try:
            if check():
                return time.monotonic() - t0
        except Exception as e:  # any probe error means "not yet"; kept for the message
            last_error = e
        if time.monotonic() - t0 > timeout:
            detail = f" (last error: {last_error})" if last_error else ""
            if proc is not None:
                raise proc.failure(f"did not get ready within {timeout:.0f} s: {what}{detail}")
            raise ComponentFailed(f"timed out after {timeout:.0f} s waiting until {what}{detail}")
        time.sleep(interval)
