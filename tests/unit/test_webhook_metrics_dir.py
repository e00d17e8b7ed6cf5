"""PROMETHEUS_MULTIPROC_DIR as the manifests set it: /tmp/metrics on an emptyDir, which nothing
creates and which outlives a container restart (webhook/__main__.py prepare_metrics_dir)."""

from __future__ import annotations

from pathlib import Path

from webhook.__main__ import prepare_metrics_dir


def test_a_missing_directory_is_created(tmp_path: Path) -> None:
    target = tmp_path / "tmp" / "metrics"
    prepare_metrics_dir(target)
    assert target.is_dir()


def test_the_previous_runs_files_are_removed_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "counter_7.db").write_bytes(b"old")
    (tmp_path / "gauge_livemin_8.db").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("kept")
    prepare_metrics_dir(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
