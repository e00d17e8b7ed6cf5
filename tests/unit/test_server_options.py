"""What the webhook server hands gunicorn for the listening options."""

from __future__ import annotations

import pytest

from webhook.server import ServerOptions, WebhookServer


@pytest.mark.parametrize(
    ("bind", "reuse_port", "addresses"),
    [
        ("0.0.0.0:8443", False, ["0.0.0.0:8443"]),
        ("127.0.0.1:9000,127.0.0.1:9001", True, ["127.0.0.1:9000", "127.0.0.1:9001"]),
        (" 127.0.0.1:9000 , [::1]:9000 ,", False, ["127.0.0.1:9000", "[::1]:9000"]),
    ],
)
def test_each_address_is_listened_on_and_the_port_shared_only_when_asked(
    bind: str, reuse_port: bool, addresses: list[str]
) -> None:
    server = WebhookServer(
        ServerOptions(
            bind=bind, cert_file="tls.crt", key_file="tls.key", kubeconfig=None, reuse_port=reuse_port
        )
    )
    assert server.cfg.bind == addresses
    assert server.cfg.reuse_port is reuse_port


def test_gunicorn_serves_with_its_own_asyncio_worker_and_python_parser() -> None:
    server = WebhookServer(ServerOptions(bind="0.0.0.0:8443", cert_file="c", key_file="k", kubeconfig=None))
    assert server.cfg.worker_class_str == "asgi"
    assert server.cfg.asgi_loop == "asyncio"
    assert server.cfg.http_parser == "python"
