"""hack/no_sessions.py, the lint check that no tracked file speaks of work sessions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "no_sessions.py"
S = "session"  # the word, kept apart so that this file does not mention what it tests


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_no_sessions", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "line",
    [
        f"written in compressed shards since {S} 11",
        f"{S.capitalize()} 15, a fresh machine",
        f"{S}s 11 to 13 measured no watchers",
        f"on this {S}'s machine",
        f"Before THIS {S.upper()}'s work",
        f"the {S}'s end against its start",
        f"admissions under contention, {S} by {S}",
    ],
)
def test_a_mention_of_a_work_session_is_found(line: str) -> None:
    assert list(load().mentions(f"first line\n{line}\n")) == [(2, line)]


@pytest.mark.parametrize(
    "line",
    [
        f'@pytest.fixture(scope="{S}")',
        f"one real control plane per test {S}",
        f"TLS {S} resumption",
        f"{S}_id = 12",
        f"a {S}-scoped fixture",
    ],
)
def test_other_senses_of_the_word_pass(line: str) -> None:
    assert list(load().mentions(line)) == []


def test_the_script_fails_on_a_mention_and_names_the_line(tmp_path: Path) -> None:
    bad, good = tmp_path / "bad.md", tmp_path / "good.md"
    bad.write_text(f"# Notes\n\nMeasured in {S} 14.\n")
    good.write_text("# Notes\n\nMeasured on 2026-11-27.\n")
    run = subprocess.run([sys.executable, SCRIPT, bad, good], capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stdout == f"{bad}:3: Measured in {S} 14.\n"
    run = subprocess.run([sys.executable, SCRIPT, good], capture_output=True, text=True)
    assert (run.returncode, run.stdout) == (0, "")


def test_no_tracked_file_mentions_a_work_session() -> None:
    run = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stdout + run.stderr
