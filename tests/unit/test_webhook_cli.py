"""`python -m webhook` refuses bad flags with a message that says what to do."""

from __future__ import annotations

import pytest

from webhook.__main__ import main


@pytest.fixture
def cert_files(tmp_path):
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("x")
    return ["--cert-file", str(tmp_path / "tls.crt"), "--key-file", str(tmp_path / "tls.key")]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--serve", "priorty"], "give one or more of priority, quota, preview, comma-separated"),
        (["--serve", ","], "give one or more of priority, quota, preview"),
        (["--tls-secret", "just-a-name"], "give NAMESPACE/NAME"),
        (["--cache-quiet-seconds", "0"], "give a number of seconds above 0"),
        (["--cache-quiet-seconds", "nan"], "give a number of seconds above 0"),
        (["--cache-quiet-seconds", "soon"], "invalid float value"),
        (["--client-ca-file", "/nonexistent/client-ca.crt"], "does not exist"),
        (["--client-deadline-seconds", "0"], "must be positive"),
        (["--bind", " , "], "give HOST:PORT, or several comma-separated"),
        (["--peer-address", "10.0.0.7"], "--peer-address '10.0.0.7': give HOST:PORT"),
        (["--peer-address", "10.0.0.7:http"], "give HOST:PORT"),
        (["--peer-address", "10.0.0.7 :8444"], "give HOST:PORT"),
        (["--peer-address", "$(POD_IP):8444"], "give HOST:PORT"),
    ],
)
def test_bad_flags_are_refused(cert_files, capsys, flags, message):
    with pytest.raises(SystemExit) as exited:
        main([*cert_files, *flags])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_tls_secret_needs_the_bootstrap_file_names(tmp_path, capsys):
    (tmp_path / "server.pem").write_text("x")
    (tmp_path / "server.key").write_text("x")
    flags = ["--cert-file", str(tmp_path / "server.pem"), "--key-file", str(tmp_path / "server.key")]
    with pytest.raises(SystemExit):
        main([*flags, "--tls-secret", "priogate-system/priogate-webhook-tls"])
    assert "DIR/tls.crt and DIR/tls.key" in capsys.readouterr().err


def test_missing_certificate_says_how_to_issue_one(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--cert-file", str(tmp_path / "none.crt"), "--key-file", str(tmp_path / "none.key")])
    assert "python -m certs" in capsys.readouterr().err
