"""Where the control-plane binaries are: built by hack/controlplane/build.sh into a version-keyed
cache directory outside the repository (skipped when already complete)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from localcluster.procs import progress

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "hack" / "controlplane" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class BuildFailed(RuntimeError):
    pass


def ensure_binaries() -> Path:
    """The binary directory; builds it first when needed (the first build takes a while).

    PRIOGATE_BIN_DIR points at an existing directory and skips the build script altogether."""
    override = os.environ.get("PRIOGATE_BIN_DIR")
    if override:
        bin_dir = Path(override)
        _check(bin_dir, f"PRIOGATE_BIN_DIR={override}")
        return bin_dir
    if shutil.which("go") is None:
        raise BuildFailed(
            "'go' is not on PATH: the control plane is built from source with Go >= 1.26. Install Go, "
            "or set PRIOGATE_BIN_DIR to a directory holding " + ", ".join(BINARIES)
        )
    t0 = time.monotonic()
    # stderr is inherited so the build's progress is visible; the last stdout line is the directory.
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise BuildFailed(
            f"{BUILD_SCRIPT} failed with exit code {result.returncode}; its output is above. "
            "Fix the cause and re-run `python -m localcluster build` (finished binaries are kept)."
        )
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise BuildFailed(f"{BUILD_SCRIPT} printed no directory; run it by hand to see why")
    bin_dir = Path(lines[-1])
    _check(bin_dir, BUILD_SCRIPT.name)
    elapsed = time.monotonic() - t0
    if elapsed > 5:
        progress(f"control plane binaries ready in {elapsed:.0f} s: {bin_dir}")
    return bin_dir


def _check(bin_dir: Path, source: str) -> None:
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise BuildFailed(
            f"{source}: {bin_dir} lacks {', '.join(missing)}; rebuild with `python -m localcluster build`"
        )


HELM_BUILD_SCRIPT = REPO / "hack" / "helm" / "build.sh"


def ensure_helm() -> Path:
    """The helm binary, built by hack/helm/build.sh like the control plane (skipped when built).

    PRIOGATE_HELM names an existing helm binary and skips the build script."""
    override = os.environ.get("PRIOGATE_HELM")
    if override:
        if not os.access(override, os.X_OK):
            raise BuildFailed(f"PRIOGATE_HELM={override} is not an executable file")
        return Path(override)
    if shutil.which("go") is None:
        raise BuildFailed("'go' is not on PATH: helm is built from source with Go, or set PRIOGATE_HELM")
    result = subprocess.run(["bash", str(HELM_BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not os.access(lines[-1], os.X_OK):
        raise BuildFailed(f"{HELM_BUILD_SCRIPT} failed (exit code {result.returncode}); its output is above")
    return Path(lines[-1])
