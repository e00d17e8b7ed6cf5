"""Flags, subcommands, errors and exit codes, as kubectl has them.

kubectl's conventions kept here: global flags (--kubeconfig, --context, --as, -n/--namespace) before
or after the subcommand; the namespace defaults to the kubeconfig context's; errors go to stderr
as "error: ..." and an API error as "Error from server (Reason): message"; every failure,
usage errors included, exits 1 (kubectl's cmdutil.CheckErr exits 1 for all of them; argparse's
own 2 is overridden to match).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import NoReturn, TextIO

import urllib3

from kubectl_priogate import reservations, simulation, why, why_report
from kubectl_priogate.output import FORMATS, render, shown
from kubectl_priogate.source import LedgerNamespaceNotFound, Source
from priogate import __version__
from priogate.clock import rfc3339
from priogate.kube.client import ApiError
from priogate.kube.kubeconfig import KubeconfigError, connect
from priogate.ledger.codec import DEFAULT_LEDGER_NAMESPACE
from priogate.podgroup import group_of
from priogate.preemption import policy as preemption_policy
from priogate.preemption.snapshot import load_objects

PROG = "kubectl priogate"
EXIT_ERROR = 1
# The Status reasons kubectl prints in "Error from server (Reason)", by HTTP status
# (k8s.io/apimachinery/pkg/apis/meta/v1 StatusReason).
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class CliError(Exception):
    """A failure to report as `error: <message>`."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"error: {message}\nSee '{self.prog} --help' for usage.\n")


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The global flags. On a subcommand their default is SUPPRESS, so a value given before
    the subcommand is not overwritten by the subcommand's default (argparse copies defaults)."""
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--kubeconfig", default=default, help="path to the kubeconfig file")
    parser.add_argument("--context", default=default, help="the kubeconfig context to use")
    parser.add_argument(
        "--as", dest="as_user", default=default, metavar="USER", help="act as this user (impersonation)"
    )
    parser.add_argument(
        "-n", "--namespace", default=default, help="namespace (default: the context's namespace)"
    )
    parser.add_argument(
        "--priogate-namespace",
        default=default,
        help="the namespace priogate is installed in, where its ledgers live"
        f" (default: $PRIOGATE_NAMESPACE, else {DEFAULT_LEDGER_NAMESPACE})",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default=default,
        help="json or yaml for scripts (default: a table)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Show what priogate reserves, would preempt, and why.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _common(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    res = commands.add_parser(
        "reservations", help="quota hard, used, reserved by PodGroups, reserved but unused, and free"
    )
    _common(res, suppress=True)
    res.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")

    sim = commands.add_parser(
        "simulate",
        help="the preemption engine's decisions on the live cluster (inter-pod affinity, hostPorts,"
        " volumes and DRA claims not modelled)",
    )
    _common(sim, suppress=True)
    sim.add_argument(
        "-f",
        "--filename",
        help="add these Pods and PodGroups (YAML or JSON, - is stdin) as if submitted now",
    )
    sim.add_argument("--explain", action="store_true", help="add, per decision, why every other node lost")
    # The controller's own policy flags, so an admin can ask what the live controller would do.
    preemption_policy.add_arguments(sim)

    w = commands.add_parser("why", help="why a pod is pending or was preempted, why a PodGroup is pending")
    _common(w, suppress=True)
    w.add_argument("target", metavar="POD | pod/NAME | podgroup/NAME")
    return parser


def _namespace(args: argparse.Namespace, default: str) -> str:
    return args.namespace or default


def cmd_reservations(args: argparse.Namespace, source: Source, default_ns: str, out: TextIO) -> int:
    namespace = None if args.all_namespaces else _namespace(args, default_ns)
    ledgers = source.read_ledgers(namespace)
    quotas = source.resource_quotas(namespace)
    groups = source.podgroups(namespace)
    pods = source.pods(namespace)
    names = sorted(
        {namespace} if namespace else {*ledgers, *(str(q["metadata"]["namespace"]) for q in quotas)}
    )
    now = dt.datetime.now(dt.UTC)
    reports = []
    for ns in names:
        ledger = ledgers.get(ns)
        reports.append(
            reservations.namespace_report(
                ns,
                [q for q in quotas if q["metadata"]["namespace"] == ns],
                ledger.entries if ledger else {},
                [g for g in groups if g["metadata"]["namespace"] == ns],
                [p for p in pods if p["metadata"]["namespace"] == ns],
                now,
                ledger.stored_bytes if ledger else None,
            )
        )
    reports = [r for r in reports if r.rows or r.holds]
    if args.output:
        out.write(render(reservations.to_json(reports), args.output))
    elif not reports:
        where = "" if namespace is None else f" in {namespace} namespace"
        sys.stderr.write(f"No ResourceQuotas or PodGroup reservations found{where}.\n")
    else:
        out.write(reservations.render_table(reports, all_namespaces=namespace is None))
    return 0


def _read_file(path: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as e:
        raise CliError(
            f'the path "{path}" does not exist' if isinstance(e, FileNotFoundError) else str(e)
        ) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text") from None


def cmd_simulate(args: argparse.Namespace, source: Source, default_ns: str, out: TextIO) -> int:
    live = simulation.Cluster(
        nodes=source.nodes(),
        pods=source.pods(),
        podgroups=source.podgroups(missing_ok=True),
        pdbs=source.pdbs(),
        priority_classes=source.priority_classes(),
    )
    extra = None
    try:
        if args.filename:
            extra = simulation.hypothetical(
                load_objects(_read_file(args.filename)),
                namespace=_namespace(args, default_ns),
                namespace_explicit=bool(args.namespace),
                now=rfc3339(dt.datetime.now(dt.UTC)),
                live=live,
            )
        result = simulation.decide(
            live,
            extra,
            policy=preemption_policy.from_arguments(args),
            explain=args.explain,
            now=time.time(),
        )
    except ValueError as e:
        raise CliError(" ".join(str(e).split())) from None
    data = simulation.report(result, extra, explain=args.explain)
    out.write(render(data, args.output) if args.output else simulation.render_table(data))
    return 0


def cmd_why(args: argparse.Namespace, source: Source, default_ns: str, out: TextIO) -> int:
    try:
        kind, name = why.parse_target(args.target)
    except ValueError as e:
        raise CliError(str(e)) from None
    namespace = _namespace(args, default_ns)
    if kind == "PodGroup":
        group = source.podgroup(namespace, name)  # NotFound goes up as kubectl prints it
        members = [p for p in source.pods(namespace) if group_of(p) == name]
        unreadable = ""
        try:
            ledger = source.ledger_entries(namespace).get(namespace)
        except ApiError as e:
            if e.status != 403:
                raise
            # A namespace user may read the group but not the ledger: say so, explain the rest.
            ledger, unreadable = None, f"cannot read the ledger: {e.message or e.reason}"
        events = source.events_regarding(namespace, kind, name)
        report = why.podgroup_report(group, members, events, ledger, ledger_error=unreadable)
    else:
        report = _why_pod(source, namespace, name)
    if args.output:
        out.write(render(why_report.to_json(report), args.output))
    else:
        out.write(why_report.render_text(report, time.time()))
    return 0


def _why_pod(source: Source, namespace: str, name: str) -> why_report.Report:
    try:
        pod = source.get("v1", "pods", namespace, name)
    except ApiError as e:
        if e.status != 404:
            raise
        pod, missing = None, e
    uid = ((pod or {}).get("metadata") or {}).get("uid")
    # Victims may be in another namespace than the gang: every PodGroup's record is read, or,
    # for a user who may list PodGroups only in the pod's namespace, those.
    try:
        groups = source.podgroups(missing_ok=True)
    except ApiError as e:
        if e.status != 403:
            raise
        groups = source.podgroups(namespace, missing_ok=True)
    records = why.records_naming(groups, namespace, name, uid)
    group = None
    group_name = group_of(pod) if pod else ""
    if group_name:
        try:
            group = source.podgroup(namespace, group_name)
        except ApiError as e:
            if e.status != 404:
                raise
    events = source.events_regarding(namespace, "Pod", name)
    report = why.pod_report(namespace, name, pod, events, records, group)
    if report is None:  # gone, and nothing remembers it: kubectl's NotFound
        raise missing
    return report


COMMANDS: dict[str, Callable[[argparse.Namespace, Source, str, TextIO], int]] = {
    "reservations": cmd_reservations,
    "simulate": cmd_simulate,
    "why": cmd_why,
}


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        connection = connect(args.kubeconfig, args.context, as_user=args.as_user)
        priogate_namespace = (
            args.priogate_namespace or os.environ.get("PRIOGATE_NAMESPACE") or DEFAULT_LEDGER_NAMESPACE
        )
        source = Source(connection.client, priogate_namespace)
        return COMMANDS[args.command](args, source, connection.namespace, out)
    # Messages are shown escaped: the server's can quote what a tenant wrote (an admission
    # refusal names the field it refused), a CLI error an object read from the cluster.
    except ApiError as e:
        reason = _REASONS.get(e.status, e.reason or str(e.status))
        err.write(f"Error from server ({shown(reason)}): {shown(e.message or e.reason)}\n")
    except (CliError, KubeconfigError, LedgerNamespaceNotFound) as e:
        err.write(f"error: {shown(e)}\n")
    except urllib3.exceptions.HTTPError as e:
        # The API server cannot be reached: kubectl's own wording names the server too.
        err.write(f"error: cannot reach the API server: {shown(e)}\n")
    return EXIT_ERROR
