"""`python -m localcluster up` / `down` (what `make up` / `make down` run), on a second, small
control plane of its own: up returns once the webhooks answer, down leaves nothing running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from localcluster.binaries import REPO
from localcluster.procs import running
from tests.e2e.helpers import Kubectl


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "localcluster", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_up_then_down_leaves_nothing_running(tmp_path: Path):
    state_dir = tmp_path / "local"
    up = _cli("up", f"--state-dir={state_dir}", "--nodes=1", "--workers=1")
    try:
        assert up.returncode == 0, up.stderr
        assert "webhooks are in the request path" in up.stderr
        state = json.loads((state_dir / "state.json").read_text())
        assert state["ready"] is True
        assert state["webhook_mtls"] is True, "make run / make up require kube-apiserver's client cert"
        records = [state["launcher"], *state["components"]]
        names = [c["name"] for c in state["components"]]
        assert names == [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "webhook",
            "controller",
        ]
        assert all(running(r["pid"], r["start_time"]) for r in records)

        kubectl = Kubectl(state_dir / "kubeconfig")
        assert kubectl.json("get", "nodes")["items"][0]["metadata"]["name"] == "kwok-node-0"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }
        created = json.loads(
            kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod)).stdout
        )
        assert created["spec"]["priority"] == 0, (
            "the webhook resolved no priority (plugin disabled by default)"
        )
        assert _cli("up", f"--state-dir={state_dir}").returncode == 0  # idempotent: already up
    finally:
        down = _cli("down", f"--state-dir={state_dir}")
    assert down.returncode == 0, down.stderr
    survivors = [r for r in records if running(r["pid"], r["start_time"])]
    assert not survivors, f"processes survived down: {survivors}"
    assert not (state_dir / "state.json").exists()
    assert not Path(state["etcd_data"]).exists()
    assert _cli("status", f"--state-dir={state_dir}").returncode == 1
