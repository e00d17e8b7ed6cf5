"""The preemption policy: every choice an admin makes about how priogate preempts, in one value.

The live controller, `python -m controller simulate` and `kubectl priogate simulate` all build
it from the same command-line flags (`add_arguments` / `from_arguments`), so an admin can ask
what the live controller would do by passing it the same flags. The defaults are
kube-scheduler's behaviour (DefaultPreemption, pkg/scheduler/framework/plugins/
defaultpreemption) wherever kube-scheduler has one: every policy that departs from it is off
by default.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

OPT_OUT_MODES = ("hard", "soft")
PDB_MODES = ("best-effort", "strict")
# Victim selection strategies (YuniKorn's preemption_victim_pods_selection_strategy), tried in
# the admin's order, each a fallback for the ones before it:
#   single         one victim whose request is within the deviation of the preemptor's
#   multiple       the fewest victims, at most max_victims
#   kube-scheduler kube-scheduler's own choice (SelectVictimsOnNode + its node order)
SINGLE, MULTIPLE, KUBE_SCHEDULER = "single", "multiple", "kube-scheduler"
VICTIM_STRATEGIES = (SINGLE, MULTIPLE, KUBE_SCHEDULER)


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    # Pods labelled priogate.io/allow-preemption=false: "hard" = never victims, "soft" =
    # victims only when nothing else works (YuniKorn's "victimised last").
    opt_out_mode: str = "hard"
    # A single-pod preemptor never leaves a running PodGroup below minMember: it takes only
    # surplus members, or the whole group (as the gang path does).
    gang_aware_victims: bool = False
    # Victims by class, in YuniKorn's order: regular pods, then owner/driver pods (named in
    # another pod's ownerReferences), then opted-out pods (soft mode).
    victim_classes: bool = False
    # Equal-priority victims by QoS class: BestEffort, then Burstable, then Guaranteed.
    qos_order: bool = False
    # Seconds a pod must have been unschedulable before it preempts (YuniKorn's
    # preemption_start_delay); 0 = at once, as kube-scheduler.
    start_delay: float = 0.0
    # Strategies in fallback order; kube-scheduler's own choice alone by default.
    victim_selection: tuple[str, ...] = (KUBE_SCHEDULER,)
    # "single": a victim's request may deviate from the preemptor's by at most this percent.
    single_victim_deviation: float = 10.0
    # "multiple": at most this many victims (0 = no limit).
    max_victims: int = 0
    # "best-effort": PDB-violating victims only when nothing else works (kube-scheduler);
    # "strict": never a victim whose eviction would violate a PodDisruptionBudget.
    pdb_mode: str = "best-effort"

    def __post_init__(self) -> None:
        if self.opt_out_mode not in OPT_OUT_MODES:
            raise ValueError(f"opt-out mode must be one of {OPT_OUT_MODES}, not {self.opt_out_mode!r}")
        if self.pdb_mode not in PDB_MODES:
            raise ValueError(f"PDB mode must be one of {PDB_MODES}, not {self.pdb_mode!r}")
        if not math.isfinite(self.start_delay) or self.start_delay < 0:
            raise ValueError(f"preemption start delay must be a finite number >= 0, not {self.start_delay}")
        if not self.victim_selection:
            raise ValueError("victim selection needs at least one strategy")
        for name in self.victim_selection:
            if name not in VICTIM_STRATEGIES:
                raise ValueError(
                    f"victim selection strategy must be one of {VICTIM_STRATEGIES}, not {name!r}"
                )
        if len(set(self.victim_selection)) != len(self.victim_selection):
            raise ValueError(f"victim selection names a strategy twice: {','.join(self.victim_selection)}")
        if not math.isfinite(self.single_victim_deviation) or self.single_victim_deviation < 0:
            deviation = self.single_victim_deviation
            raise ValueError(f"single victim deviation must be a finite percentage >= 0, not {deviation}")
        count = self.max_victims
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"max victims must be an integer >= 0, not {self.max_victims!r}")

    @property
    def kube_scheduler_victims(self) -> bool:
        """Victim selection is kube-scheduler's alone (no strategy before or instead of it)."""
        return self.victim_selection == (KUBE_SCHEDULER,)


DEFAULT_POLICY = PreemptionPolicy()


def parse_strategies(text: str) -> tuple[str, ...]:
    """ "single,multiple" -> ("single", "multiple"); validated by PreemptionPolicy."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The policy flags, shared by every program that decides or simulates preemption."""
    parser.add_argument(
        "--opt-out-mode",
        choices=OPT_OUT_MODES,
        default=DEFAULT_POLICY.opt_out_mode,
        help="pods labelled priogate.io/allow-preemption=false: hard = never victims (default), "
        "soft = victims only when nothing else works",
    )
    parser.add_argument(
        "--gang-aware-victims",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_POLICY.gang_aware_victims,
        help="a single pod's preemption never leaves a running PodGroup below minMember: only its "
        "surplus members or the whole group are victims (off by default, as kube-scheduler)",
    )
    parser.add_argument(
        "--victim-classes",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_POLICY.victim_classes,
        help="take victims by class: regular pods, then owner/driver pods (named in another pod's "
        "ownerReferences), then opted-out pods (off by default, as kube-scheduler)",
    )
    parser.add_argument(
        "--qos-order",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_POLICY.qos_order,
        help="among equal-priority victims take BestEffort, then Burstable, then Guaranteed pods "
        "(off by default, as kube-scheduler)",
    )
    parser.add_argument(
        "--preemption-start-delay",
        type=float,
        default=DEFAULT_POLICY.start_delay,
        metavar="SECONDS",
        help="a pod preempts only once it has been unschedulable (PodScheduled=False) this long "
        "(default 0: at once, as kube-scheduler)",
    )
    parser.add_argument(
        "--victim-selection",
        type=parse_strategies,
        default=",".join(DEFAULT_POLICY.victim_selection),  # argparse applies `type` to it
        metavar="STRATEGY[,STRATEGY...]",
        help="victim selection strategies in fallback order: single (one victim within "
        "--single-victim-deviation of the preemptor's request), multiple (fewest victims, at most "
        "--max-victims), kube-scheduler (its own choice; the default)",
    )
    parser.add_argument(
        "--single-victim-deviation",
        type=float,
        default=DEFAULT_POLICY.single_victim_deviation,
        metavar="PERCENT",
        help="the single strategy's largest deviation of the victim's request from the preemptor's, "
        "in percent (default 10)",
    )
    parser.add_argument(
        "--max-victims",
        type=int,
        default=DEFAULT_POLICY.max_victims,
        metavar="N",
        help="the multiple strategy's largest number of victims (default 0: no limit)",
    )
    parser.add_argument(
        "--pdb-mode",
        choices=PDB_MODES,
        default=DEFAULT_POLICY.pdb_mode,
        help="best-effort = PodDisruptionBudget-violating victims only when nothing else works "
        "(default, as kube-scheduler); strict = never a victim whose eviction violates a PDB",
    )


def from_arguments(args: argparse.Namespace) -> PreemptionPolicy:
    """The policy the flags of `add_arguments` describe (ValueError when they conflict)."""
    return PreemptionPolicy(
        opt_out_mode=args.opt_out_mode,
        gang_aware_victims=args.gang_aware_victims,
        victim_classes=args.victim_classes,
        qos_order=args.qos_order,
        start_delay=args.preemption_start_delay,
        victim_selection=tuple(args.victim_selection),
        single_victim_deviation=args.single_victim_deviation,
        max_victims=args.max_victims,
        pdb_mode=args.pdb_mode,
    )
