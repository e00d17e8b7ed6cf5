"""The preemption policy: every choice an admin makes about how priogate preempts, in one value.

The live controller, `python -m controller simulate` and `kubectl priogate simulate` all build
it from the same command-line flags (`add_arguments` / `from_arguments`), so an admin can ask
what the live controller would do by passing it the same flags. The defaults are
kube-scheduler's behaviour (DefaultPreemption, pkg/scheduler/framework/plugins/
defaultpreemption) wherever kube-scheduler has one.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

OPT_OUT_MODES = ("hard", "soft")


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    # Pods labelled priogate.io/allow-preemption=false: "hard" = never victims, "soft" =
    # victims only when nothing else works (YuniKorn's "victimised last").
    opt_out_mode: str = "hard"

    def __post_init__(self) -> None:
        if self.opt_out_mode not in OPT_OUT_MODES:
            raise ValueError(f"opt-out mode must be one of {OPT_OUT_MODES}, not {self.opt_out_mode!r}")


DEFAULT_POLICY = PreemptionPolicy()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The policy flags, shared by every program that decides or simulates preemption."""
    parser.add_argument(
        "--opt-out-mode",
        choices=OPT_OUT_MODES,
        default=DEFAULT_POLICY.opt_out_mode,
        help="pods labelled priogate.io/allow-preemption=false: hard = never victims (default), "
        "soft = victims only when nothing else works",
    )


def from_arguments(args: argparse.Namespace) -> PreemptionPolicy:
    """The policy the flags of `add_arguments` describe (ValueError when they conflict)."""
    return PreemptionPolicy(opt_out_mode=args.opt_out_mode)
