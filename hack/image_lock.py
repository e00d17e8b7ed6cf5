"""Write requirements-image.txt: requirements.txt's pins with the sha256 of every file pip may
install for them in the image (CPython 3.11, glibc, x86_64 and aarch64), so the Dockerfile can
install with `pip install --require-hashes` (https://pip.pypa.io/en/stable/topics/secure-installs/).
Run by `make image-lock`; the same pins give the same file.

The hashes come from pip's own resolver (`pip install --dry-run --report`, which records the
index's sha256 of the file it picked), once per platform. requirements.txt is fully pinned, so
--no-deps resolves exactly its pins. Wheels only (--only-binary=:all:): the image compiles nothing,
so a pin without a wheel for a platform fails here, not in the image build.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "requirements-image.txt"
PLATFORMS = {
    "x86_64": ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"],
    "aarch64": ["manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"],
}


def resolve(requirements: list[str], platform_tags: list[str]) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, {sha256}) of the files pip would install on that platform."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(requirements) + "\n")
        platforms = [a for p in platform_tags for a in ("--platform", p)]
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
             "--no-deps", "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", *platforms,
             "--target", str(Path(tmp) / "target"), "--report", str(report), "-r", str(req)],
            check=True,
        )  # fmt: skip
        installs = json.loads(report.read_text())["install"]
    out: dict[str, tuple[str, set[str]]] = {}
    for i in installs:
        hashes = i["download_info"]["archive_info"]["hashes"]
        out[i["metadata"]["name"]] = (i["metadata"]["version"], {hashes["sha256"]})
    return out


def lock(requirements: list[str]) -> dict[str, tuple[str, set[str]]]:
    merged: dict[str, tuple[str, set[str]]] = {}
    for tags in PLATFORMS.values():
        for name, (version, hashes) in resolve(requirements, tags).items():
            merged.setdefault(name, (version, set()))[1].update(hashes)
    return merged


def render(pins: dict[str, tuple[str, set[str]]]) -> str:
    lines = []
    for name in sorted(pins, key=str.lower):
        version, hashes = pins[name]
        lines.append(
            f"{name}=={version} \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in sorted(hashes))
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    pins = [
        ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")
    ]
    footer = "(Dockerfile; regenerate: make image-lock). Do not edit by hand.\n"
    TARGET.write_text(
        "# requirements.txt's pins with their files' hashes for the image " + footer + render(lock(pins))
    )
    print(f"{TARGET.name}: {len(pins)} pins")


if __name__ == "__main__":
    main()
