"""`python -m certs`: issue a CA and a webhook serving certificate, write PEM files, print the caBundle.

    python -m certs --out .local/certs --dns priogate.priogate-system.svc --ip 127.0.0.1

An existing CA in --out is reused, so re-running renews the serving certificate without
changing the caBundle registered in the webhook configurations.

In a cluster: the priogate-cabundle Job creates the serving Secret and puts its CA into the
webhook configurations; the webhook pod's init container waits for the Secret and writes the files:

    python -m certs bootstrap --namespace priogate-system
    python -m certs bootstrap --namespace priogate-system --out /var/run/priogate/tls \
        --no-create-secret --no-inject-ca-bundle

At `helm uninstall` the chart's post-delete Job removes what the programs created there:

    python -m certs uninstall --namespace priogate-system
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import sys
from pathlib import Path

from certs.files import write_pem
from certs.issue import KeyPair, issue_ca, issue_leaf


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m certs", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(".local/certs"), help="directory for the PEM files")
    p.add_argument("--dns", action="append", default=[], help="DNS SAN (repeatable)")
    p.add_argument("--ip", action="append", default=[], help="IP SAN (repeatable; default 127.0.0.1)")
    p.add_argument("--days", type=int, default=365, help="validity of the serving certificate")
    p.add_argument("--common-name", default="priogate-webhook")
    args = p.parse_args(argv)
    if not args.dns and not args.ip:
        args.ip = ["127.0.0.1"]
    for ip in args.ip:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            p.error(f"--ip {ip!r} is not an IP address; put host names in --dns")
    return args


def _bootstrap(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m certs bootstrap")
    p.add_argument("--namespace", default="priogate-system")
    p.add_argument("--secret", default="priogate-webhook-tls")
    p.add_argument("--service", default="priogate-webhook")
    p.add_argument(
        "--config-name", default="priogate", help="webhook configurations to put the caBundle into"
    )
    p.add_argument("--out", type=Path, help="write ca.crt, tls.crt and tls.key here")
    p.add_argument(
        "--create-secret",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="create the Secret (a new CA) when there is none; --no-create-secret waits for it",
    )
    p.add_argument(
        "--wait-seconds", type=float, default=300.0, help="with --no-create-secret: how long to wait"
    )
    p.add_argument(
        "--inject-ca-bundle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="put the CA into the webhook configurations (fails when neither exists yet)",
    )
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    args = p.parse_args(argv)
    if args.out is None and not args.inject_ca_bundle and not args.create_secret:
        p.error("nothing to do: give --out, leave --create-secret or --inject-ca-bundle on")
    from certs.bootstrap import bootstrap
    from priogate.kube.client import load_client
    from priogate.logs import configure_logging

    configure_logging()
    try:
        bootstrap(
            load_client(args.kubeconfig),
            args.namespace,
            args.secret,
            args.service,
            args.out,
            args.config_name,
            create_secret=args.create_secret,
            inject=args.inject_ca_bundle,
            wait_seconds=0.0 if args.create_secret else args.wait_seconds,
        )
    except LookupError as e:  # no Secret, or no configuration yet: a Job or a pod restart retries
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _uninstall(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m certs uninstall",
        description="delete the serving Secret, the ledgers, the controller's Lease and"
        " the PriorityClass table from priogate's namespace, once its pods are gone (certs/uninstall.py)",
    )
    p.add_argument("--namespace", default="priogate-system")
    p.add_argument("--secret", default="priogate-webhook-tls", help="empty: keep the Secret (the admin's)")
    p.add_argument("--lease", default="priogate-controller")
    p.add_argument("--wait-seconds", type=float, default=120.0, help="how long to wait for the pods to go")
    p.add_argument("--kubeconfig", default=None, help="default: in-cluster configuration")
    args = p.parse_args(argv)
    from certs.uninstall import uninstall
    from priogate.kube.client import load_client

    uninstall(
        load_client(args.kubeconfig),
        args.namespace,
        wait_seconds=args.wait_seconds,
        secret=args.secret,
        lease=args.lease,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bootstrap"]:
        return _bootstrap(argv[1:])
    if argv[:1] == ["uninstall"]:
        return _uninstall(argv[1:])
    args = _parse_args(argv)
    out: Path = args.out
    ca_cert, ca_key = out / "ca.crt", out / "ca.key"
    if ca_cert.exists() and ca_key.exists():
        ca = KeyPair(ca_cert.read_bytes(), ca_key.read_bytes())
        print(f"reusing CA {ca_cert}", file=sys.stderr)
    else:
        ca = issue_ca()
        write_pem(ca_cert, ca.cert_pem)
        write_pem(ca_key, ca.key_pem, private=True)
        print(f"issued CA {ca_cert}", file=sys.stderr)
    # For clients too: replicas relaying ledger admissions present it (webhook/ledger_relay.py).
    leaf = issue_leaf(
        ca, args.common_name, dns_names=args.dns, ip_addresses=args.ip, days=args.days, client=True
    )
    write_pem(out / "tls.crt", leaf.cert_pem)
    write_pem(out / "tls.key", leaf.key_pem, private=True)
    print(
        f"issued serving certificate {out / 'tls.crt'} for {', '.join(args.dns + args.ip)}", file=sys.stderr
    )
    print(base64.b64encode(ca.cert_pem).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
