"""`python -m certs bootstrap` as the chart and manifests run it: every Job's and init
container's arguments parse, and each names something to do (a pre-install Job that only creates
the Secret exited 2 on "nothing to do", and `helm install` waited on it until its timeout)."""

from __future__ import annotations

from typing import Any

import pytest

import certs.__main__ as cli
import certs.bootstrap
from tests.unit.chart_render import render


def bootstrap_args() -> list[tuple[str, list[str]]]:
    found = []
    for (kind, name), obj in render().items():
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            command = (c.get("command") or []) + (c.get("args") or [])
            if command[:4] == ["python", "-m", "certs", "bootstrap"]:
                found.append((f"{kind}/{name}/{c['name']}", command[4:]))
    return found


@pytest.mark.parametrize(("where", "argv"), bootstrap_args(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_bootstrap_the_chart_runs_parses_and_does_something(where, argv, monkeypatch):
    called: list[dict[str, Any]] = []
    monkeypatch.setattr(certs.bootstrap, "bootstrap", lambda *a, **kw: called.append(kw))
    monkeypatch.setattr("priogate.kube.client.load_client", lambda kubeconfig: object())
    assert cli.main(["bootstrap", *argv]) == 0, where
    (kw,) = called
    assert kw["create_secret"] or kw["inject"] or "--out" in " ".join(argv), where


def test_the_pre_install_job_only_creates_the_secret():
    jobs = dict(bootstrap_args())
    assert any("--no-inject-ca-bundle" in argv for argv in jobs.values()), jobs


def test_a_bootstrap_with_nothing_to_do_is_refused():
    with pytest.raises(SystemExit) as exited:
        cli.main(["bootstrap", "--no-create-secret", "--no-inject-ca-bundle"])
    assert exited.value.code == 2
