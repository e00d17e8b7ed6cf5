"""Flags, exit codes and error lines as kubectl has them; the kubeconfig found as kubectl finds it."""

from __future__ import annotations

import io

import pytest
import yaml

from kubectl_priogate import main as cli
from priogate.kube.client import ApiError
from priogate.kube.kubeconfig import KubeconfigError, connect


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["reservations"], {"namespace": None, "all_namespaces": False, "output": None}),
        (["-n", "a", "reservations"], {"namespace": "a"}),
        (["reservations", "-n", "a"], {"namespace": "a"}),
        (
            ["--context", "c", "why", "pod/x", "-o", "yaml"],
            {"context": "c", "output": "yaml", "target": "pod/x"},
        ),
        (["reservations", "-A"], {"all_namespaces": True}),
        (["--as", "alice", "reservations"], {"as_user": "alice"}),
        (["reservations", "--as=alice"], {"as_user": "alice"}),
        (["simulate"], {"filename": None, "explain": False, "opt_out_mode": "hard"}),
        (
            ["simulate", "-f", "-", "--explain", "--opt-out-mode", "soft"],
            {"filename": "-", "explain": True, "opt_out_mode": "soft"},
        ),
        (
            [
                "simulate",
                "--pdb-mode",
                "strict",
                "--victim-selection",
                "single,multiple",
                "--gang-aware-victims",
            ],
            {"pdb_mode": "strict", "victim_selection": ("single", "multiple"), "gang_aware_victims": True},
        ),
    ],
)
def test_global_flags_before_or_after_the_subcommand(argv, expected):
    args = cli.build_parser().parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: COMMAND"),
        (["frob"], "invalid choice: 'frob'"),
        (["why"], "the following arguments are required"),
        (["reservations", "-o", "wide"], "invalid choice: 'wide'"),
    ],
)
def test_usage_errors_exit_1_as_kubectl(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert "See 'kubectl priogate" in err


def test_a_missing_kubeconfig_is_an_error_line(tmp_path):
    err = io.StringIO()
    assert cli.main(["--kubeconfig", str(tmp_path / "nope"), "reservations"], err=err) == 1
    assert err.getvalue() == f"error: stat {tmp_path / 'nope'}: no such file or directory\n"


class _Raising:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __call__(self, *args, **kwargs):
        raise self.error


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            ApiError(404, "Not Found", 'pods "x" not found'),
            'Error from server (NotFound): pods "x" not found\n',
        ),
        (
            ApiError(403, "Forbidden", "pods is forbidden"),
            "Error from server (Forbidden): pods is forbidden\n",
        ),
        (ApiError(418, "Teapot", ""), "Error from server (Teapot): Teapot\n"),
        # a message quoting what a tenant wrote is shown escaped, on its one line
        (
            ApiError(400, "BadRequest", 'minResources "cpu\n\x1b[2J": invalid'),
            'Error from server (BadRequest): minResources "cpu\\n\\x1b[2J": invalid\n',
        ),
    ],
)
def test_api_errors_print_as_kubectl_prints_them(monkeypatch, error, line):
    monkeypatch.setattr(
        cli, "connect", lambda *a, **k: type("C", (), {"client": None, "namespace": "default"})()
    )
    monkeypatch.setitem(cli.COMMANDS, "why", _Raising(error))
    err = io.StringIO()
    assert cli.main(["why", "x"], out=io.StringIO(), err=err) == 1
    assert err.getvalue() == line


def _kubeconfig(path, *, current: str | None = "a"):
    cluster = {
        "name": "local",
        "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
    }
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [
            {"name": "a", "context": {"cluster": "local", "user": "me", "namespace": "team-a"}},
            {"name": "b", "context": {"cluster": "local", "user": "me"}},
        ],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(("context", "namespace"), [(None, "team-a"), ("a", "team-a"), ("b", "default")])
def test_the_namespace_is_the_contexts(tmp_path, context, namespace):
    assert connect(_kubeconfig(tmp_path / "config"), context).namespace == namespace


def test_unknown_or_missing_context(tmp_path):
    with pytest.raises(KubeconfigError, match='context "zzz" does not exist'):
        connect(_kubeconfig(tmp_path / "config"), "zzz")
    with pytest.raises(KubeconfigError, match="current-context is not set"):
        connect(_kubeconfig(tmp_path / "other", current=None))


def test_kubeconfig_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path / "config"))
    assert connect().namespace == "team-a"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="no kubeconfig found"):
        connect()


class _Cluster:
    """An API client over a few objects by path: GET answers 404 for anything else, as kube-apiserver
    does for a ConfigMap in a namespace that does not exist."""

    def __init__(self, namespaces: set[str]) -> None:
        self.namespaces = namespaces
        self.paths: list[str] = []

    def get(self, path: str, query=None, timeout=None) -> dict:
        self.paths.append(path)
        name = path.rsplit("/", 1)[1]
        if path.startswith("/api/v1/namespaces/") and path.count("/") == 4 and name in self.namespaces:
            return {"metadata": {"name": name}}
        if query is not None:  # a LIST with a label selector: empty, as in a missing namespace
            return {"items": []}
        raise ApiError(404, "Not Found", "not found")

    def list_all(self, path: str, timeout=None) -> list:
        self.paths.append(path)
        return []


def _run(monkeypatch, cluster: _Cluster, argv: list[str]) -> tuple[int, str]:
    monkeypatch.setattr(
        cli, "connect", lambda *a, **k: type("C", (), {"client": cluster, "namespace": "team-a"})()
    )
    err = io.StringIO()
    return cli.main(argv, out=io.StringIO(), err=err), err.getvalue()


@pytest.mark.parametrize("argv", [["reservations"], ["reservations", "-A"]])
def test_ledgers_namespace_missing_is_an_error_not_nothing_reserved(monkeypatch, argv):
    """priogate installed into `gate`: the default priogate-system does not exist, and the plugin
    says so instead of "No ... reservations found"."""
    code, err = _run(monkeypatch, _Cluster({"team-a", "gate"}), argv)
    assert code == 1
    assert err.startswith('error: namespace "priogate-system", where priogate keeps its ledgers')
    assert "--priogate-namespace" in err


@pytest.mark.parametrize("how", ["flag", "env"])
def test_priogate_namespace_flag_or_environment_names_where_ledgers_are_read(monkeypatch, capsys, how):
    cluster = _Cluster({"team-a", "gate"})
    argv = ["reservations"]
    if how == "flag":
        argv = ["--priogate-namespace", "gate", *argv]
    else:
        monkeypatch.setenv("PRIOGATE_NAMESPACE", "gate")
    code, err = _run(monkeypatch, cluster, argv)
    assert (code, err) == (0, "")
    assert (
        capsys.readouterr().err == "No ResourceQuotas or PodGroup reservations found in team-a namespace.\n"
    )
    assert "/api/v1/namespaces/gate/configmaps/podgroup-ledger.team-a" in cluster.paths
    assert not [p for p in cluster.paths if "priogate-system" in p]
