"""What a failed helm command leaves to read: the release namespace's Jobs, pods and events, the
real node's conditions and taints, the containers' last log lines, and the tails of kubelet's and
containerd's logs. CI keeps only its output, so a failure must say here which pod waited and why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster import LocalCluster
from localcluster.procs import log_tail
from priogate.kube.client import ApiClient, ApiError, load_client, resource_path

EVENTS = 30
LOG_LINES = 20
POD_LOGS = Path("/var/log/pods")


def _attempt(what: str, read: Callable[[], str]) -> str:
    """One section of the report: a section that cannot be read says why and the rest goes on."""
    try:
        return read()
    except (ApiError, OSError, ValueError, KeyError) as e:
        return f"({what} could not be read: {e})"


def _container_states(pod: dict[str, Any]) -> list[str]:
    out = []
    status = pod.get("status", {})
    for c in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        state = json.dumps(c.get("state", {}), sort_keys=True)
        last = json.dumps(c.get("lastState", {}), sort_keys=True)
        out.append(f"    {c['name']}: restarts {c.get('restartCount', 0)}, state {state}, last {last}")
    return out


def _condition(c: dict[str, Any]) -> str:
    why = f" ({c['reason']}: {c.get('message', '')})" if c.get("reason") else ""
    return f"{c['type']}={c['status']}{why}"


def _log(namespace: str, pod: dict[str, Any], container: str) -> str:
    """The container's log files as kubelet writes them (its default podLogsDir): kube-apiserver
    has no client certificate for this node's kubelet, so `kubectl logs` cannot read them."""
    meta = pod["metadata"]
    files = sorted(
        POD_LOGS.glob(f"{namespace}_{meta['name']}_{meta['uid']}/{container}/*.log"),
        key=lambda f: int(f.stem) if f.stem.isdigit() else -1,
    )
    if not files:
        return "(no log file yet)"
    # The container's current run and the one before it (a restarted container's last words).
    return "\n".join(f"{f.name}: {line}" for f in files[-2:] for line in log_tail(f, LOG_LINES).splitlines())


def _pods(api: ApiClient, namespace: str) -> str:
    lines = []
    for pod in api.list_all(resource_path("v1", "pods", namespace)):
        meta, status = pod["metadata"], pod.get("status", {})
        conditions = ", ".join(_condition(c) for c in status.get("conditions", []))
        node = pod["spec"].get("nodeName", "(unbound)")
        lines.append(f"  {meta['name']} on {node}: {status.get('phase')}; {conditions}")
        lines += _container_states(pod)
        for c in pod["spec"]["containers"]:
            text = _attempt("the log", lambda pod=pod, c=c["name"]: _log(namespace, pod, c))
            lines += [f"    | {line}" for line in text.splitlines()]
    return "\n".join(lines) or "  (no pods)"


def _jobs(api: ApiClient, namespace: str) -> str:
    lines = []
    for job in api.list_all(resource_path("batch/v1", "jobs", namespace)):
        lines.append(f"  {job['metadata']['name']}: {json.dumps(job.get('status', {}), sort_keys=True)}")
    return "\n".join(lines) or "  (no Jobs)"


def _events(api: ApiClient, namespace: str) -> str:
    events = api.list_all(resource_path("v1", "events", namespace))
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    lines = [
        f"  {e.get('lastTimestamp') or e.get('eventTime')} {e.get('type')} {e.get('reason')} "
        f"{e['involvedObject'].get('kind')}/{e['involvedObject'].get('name')} (x{e.get('count', 1)}): "
        f"{e.get('message', '').strip()}"
        for e in events[-EVENTS:]
    ]
    return "\n".join(lines) or "  (no events)"


def _nodes(api: ApiClient) -> str:
    lines = []
    for node in api.list_all("/api/v1/nodes"):
        conditions = ", ".join(_condition(c) for c in node.get("status", {}).get("conditions", []))
        taints = [f"{t['key']}:{t['effect']}" for t in node["spec"].get("taints", [])]
        lines.append(f"  {node['metadata']['name']}: {conditions}; taints {taints or 'none'}")
    return "\n".join(lines) or "  (no nodes)"


def cluster_report(lc: LocalCluster, namespace: str) -> str:
    api = load_client(str(lc.kubeconfig))
    sections = [
        ("Jobs in " + namespace, lambda: _jobs(api, namespace)),
        ("pods in " + namespace, lambda: _pods(api, namespace)),
        (f"the last {EVENTS} events in {namespace}", lambda: _events(api, namespace)),
        ("nodes", lambda: _nodes(api)),
    ]
    out = [f"--- {title} ---\n{_attempt(title, read)}" for title, read in sections]
    if lc.node is not None:
        logs = lc.node.state_dir / "logs"
        out.append(f"--- the last 40 lines of kubelet's log ---\n{log_tail(logs / 'kubelet.log', 40)}")
        out.append(f"--- the last 15 lines of containerd's log ---\n{log_tail(logs / 'containerd.log', 15)}")
    return "\n".join(out)
