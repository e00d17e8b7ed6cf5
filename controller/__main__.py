"""`python -m controller COMMAND`: the priogate controller's commands."""

from __future__ import annotations

import argparse
import os
import sys

from controller import flags, run, simulate
from priogate import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller", description="priogate controller")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    simulate_parser = commands.add_parser(
        "simulate",
        help="print, as JSON, the preemptions the controller would make for a snapshot",
        description=simulate.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    simulate.add_arguments(simulate_parser)
    run_parser = commands.add_parser(
        "run",
        help="run the controller: PodGroup phases, gang preemption, reservation reclaim",
        description=run.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags.add_arguments(run_parser)
    args = parser.parse_args(argv)
    if args.command == "simulate":
        return simulate.run(args, sys.stdin, sys.stdout, sys.stderr)
    if args.command == "run":
        return run.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _exit_quietly_on_closed_pipe() -> int:
    # `simulate ... | head`: the reader left. Python would print a traceback at exit while
    # flushing stdout; point stdout at /dev/null instead and leave like other CLI tools.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = _exit_quietly_on_closed_pipe()
    sys.exit(code)
