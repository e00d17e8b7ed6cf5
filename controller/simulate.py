"""`python -m controller simulate SNAPSHOT`: what preemption would do, changing nothing.

Reads a Kubernetes List (YAML or JSON; `-` is stdin) of Nodes, Pods, PodGroups,
PodDisruptionBudgets and PriorityClasses and prints the decisions as JSON on stdout. Bad
input is one line on stderr and exit code 2.

Not modelled (the output's `notModelled` says so too): inter-pod affinity and anti-affinity,
hostPorts, volumes and DRA resource claims. Live, kube-scheduler decides single-pod preemption
with all its filters and priogate only shapes it (docs/preemption.md, "The preemptor mode").
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import TextIO

from priogate.preemption import policy as preemption_policy
from priogate.preemption.engine import prepare, run_timed
from priogate.preemption.snapshot import build_snapshot, load_objects
from priogate.preemption.unmodelled import NOT_MODELLED

EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "snapshot", metavar="SNAPSHOT", help="a Kubernetes List as YAML or JSON; - reads stdin"
    )
    parser.add_argument("--explain", action="store_true", help="add, per decision, why every other node lost")
    preemption_policy.add_arguments(parser)


def read_text(path: str, stdin: TextIO) -> str:
    if path == "-":
        raw = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("cannot read stdin: not UTF-8 text") from None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read {path}: not UTF-8 text") from None


def run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    try:
        state = prepare(build_snapshot(load_objects(read_text(args.snapshot, stdin))))
        # The snapshot lives until exit: keep the collector from re-scanning its millions of
        # objects while decisions allocate.
        gc.freeze()
        try:
            policy = preemption_policy.from_arguments(args)
            result = run_timed(state, policy=policy, explain=args.explain, now=time.time())
        finally:
            gc.unfreeze()
    except (ValueError, RecursionError) as err:
        stderr.write(f"simulate: {' '.join(str(err).split())}\n")
        return EXIT_BAD_INPUT
    json.dump({**result.to_json(explain=args.explain), "notModelled": NOT_MODELLED}, stdout, indent=2)
    stdout.write("\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller simulate", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv), sys.stdin, sys.stdout, sys.stderr)
