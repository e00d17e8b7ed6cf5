"""Running this checkout's kubectl plugin through kubectl, as an admin does (`kubectl priogate`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.e2e.helpers import KUBECTL

REPO = Path(__file__).resolve().parents[2]

Run = Callable[..., subprocess.CompletedProcess[str]]


def install_launcher(bin_dir: Path) -> Path:
    """An executable kubectl-priogate in `bin_dir` that runs this checkout's plugin."""
    launcher = bin_dir / "kubectl-priogate"
    launcher.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from kubectl_priogate.main import main\n"
        "sys.exit(main())\n"
    )
    launcher.chmod(0o755)
    return bin_dir


def plugin_runner(bin_dir: Path, kubeconfig: Path) -> Run:
    """Run `kubectl priogate ARGS --kubeconfig ...`; kubectl refuses flags before a plugin's
    name, so they follow it."""
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KUBECONFIG", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KUBECTL, "priogate", *args, f"--kubeconfig={kubeconfig}"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )

    return run


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout
