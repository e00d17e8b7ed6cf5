"""One version, in priogate/__init__.py: what pyproject.toml, the chart, every program's --version
and both /metrics endpoints report."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
import yaml
from prometheus_client import generate_latest

from controller import __main__ as controller_main
from controller.serving import Metrics
from kubectl_priogate import main as kubectl_main
from localcluster.binaries import REPO
from priogate import __version__
from webhook import __main__ as webhook_main
from webhook import metrics as webhook_metrics


def test_the_version_lives_in_one_place() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?", __version__)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "priogate.__version__"}
    chart = yaml.safe_load((REPO / "charts" / "priogate" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    (image,) = yaml.safe_load((REPO / "manifests" / "kustomization.yaml").read_text())["images"]
    assert image["newTag"] == __version__


def test_chart_check_fails_on_another_app_version(tmp_path) -> None:
    sys.path.insert(0, str(REPO))
    from hack.chart import version_mismatches

    chart = tmp_path / "priogate"
    chart.mkdir()
    text = (REPO / "charts" / "priogate" / "Chart.yaml").read_text()
    (chart / "Chart.yaml").write_text(text.replace(f'appVersion: "{__version__}"', 'appVersion: "9.9.9"'))
    assert version_mismatches(chart=chart) == ["priogate/Chart.yaml appVersion 9.9.9"]
    assert version_mismatches() == []


@pytest.mark.parametrize(
    ("main", "expected"),
    [
        (webhook_main.main, f"python -m webhook {__version__}"),
        (controller_main.main, f"python -m controller {__version__}"),
        (kubectl_main.main, f"kubectl priogate {__version__}"),
    ],
    ids=["webhook", "controller", "kubectl-priogate"],
)
def test_every_program_reports_the_version(main, expected, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == expected + "\n"


def test_python_m_webhook_version_runs_as_a_program() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "webhook", "--version"], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert r.stdout == f"python -m webhook {__version__}\n"


def test_build_info_on_both_metrics_endpoints() -> None:
    line = f'priogate_build_info{{version="{__version__}"}} 1.0'
    assert line in generate_latest(Metrics().registry).decode()
    body, _ = webhook_metrics.render()
    assert line in body.decode()
