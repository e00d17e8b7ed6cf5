"""Fail when a tracked file speaks of its developers' work sessions (run by `make lint`).

Software names its history by versions, dates and commits; a numbered work session names nothing a
reader can look up. PATTERN is what `git grep -n -i -E` with the same expression would find
over `git ls-files`, checked in Python so that `make lint` needs nothing more. It spells its
spaces as `[ ]`, so this file does not match it. Other senses of the word (pytest's
`scope="session"`, a TLS session, "the test session") do not match.

Usage: python hack/no_sessions.py [PATH ...]   (default: every file `git ls-files` lists)
Exit status 1, with one `path:line: text` per mention, when there is any.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

PATTERN = re.compile(
    r"session[s]?[ ][0-9]+|this[ ]session|the[ ]session's|session[ ]by[ ]session", re.IGNORECASE
)


def mentions(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of each line of `text` that mentions a work session."""
    for number, line in enumerate(text.splitlines(), start=1):
        if PATTERN.search(line):
            yield number, line


def tracked_files(root: Path) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True
    ).stdout.decode()
    return [root / name for name in out.split("\0") if name]


def check(paths: Iterable[Path], root: Path) -> list[str]:
    """`path:line: text` for each mention in `paths`; binary and missing files are skipped."""
    found = []
    for path in paths:
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue  # deleted in the work tree, or a submodule
        if b"\0" in data:
            continue
        text = data.decode("utf-8", errors="replace")
        name = path.relative_to(root) if path.is_relative_to(root) else path
        found += [f"{name}:{number}: {line.strip()}" for number, line in mentions(text)]
    return found


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parent.parent
    paths = [Path(a).resolve() for a in argv] if argv else tracked_files(root)
    found = check(paths, root)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} mention(s) of work sessions: name versions, dates or commits instead,"
            " or state the current fact",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
