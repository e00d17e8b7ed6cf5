"""Re-pin requirements.txt and requirements-dev.txt from their .in files (run by `make lock`)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pin(source: str, target: str) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                report.name,
                "-r",
                str(ROOT / source),
            ],
            check=True,
        )
        installs = json.loads(Path(report.name).read_text())["install"]
    lines = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in installs)
    header = f"# Pinned from {source} (regenerate: make lock). Do not edit by hand.\n"
    (ROOT / target).write_text(header + "\n".join(sorted(lines, key=str.lower)) + "\n")
    print(f"{target}: {len(lines)} pins")


if __name__ == "__main__":
    pin("requirements.in", "requirements.txt")
    pin("requirements-dev.in", "requirements-dev.txt")
