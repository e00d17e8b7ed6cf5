"""Arms measured in interleaved batches through one kube-apiserver, and what is reported of them.

The order A B C, C B A, A B C ... puts slow drift on a shared machine (another job, a
compaction, a GC) on every arm alike. Beside the client's latencies, each arm gets
kube-apiserver's own counters over its measured requests: the time in its mutating admission
step and its CPU. With the machine saturated (8 creators on 2 cores) CPU per create is what the
latency ratio follows, without the latencies' scheduling noise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import astuple, dataclass

from localcluster.api import metric_sum
from localcluster.procs import progress
from priogate.kube.client import ApiClient

# Every mutating plugin's time, the policies' and the webhooks' included, over CREATEs.
MUTATING_STEP = "apiserver_admission_step_admission_duration_seconds"
MUTATING_STEP_LABELS = {"operation": "CREATE", "type": "admit"}
# The validating step (same metric): validating webhooks and policies, and the CEL conversion a
# validating hook's matchConditions cost on every request its rules match.
VALIDATING_STEP_LABELS = {"operation": "CREATE", "type": "validate"}
CPU = "process_cpu_seconds_total"

# After each switch, before the batch: a switch leaves work behind (kube-apiserver compiles a new
# configuration's CEL and reconnects, a restart warms its caches; the arms' own proofs differ in
# length: a registration is proven by the first call, a removal by five quiet probes), and in
# one arm's batch but not the other's it would be measured as that arm's cost per create.
SETTLE_SECONDS = 3.0

Samples = dict[str, dict[int, list[float]]]  # arm -> concurrency -> seconds per request
Ratios = dict[int, tuple[float, float]]  # concurrency -> (p50 ratio, p99 ratio)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Counters:
    """kube-apiserver's: seconds and calls of its mutating admission step over CREATEs, and its
    CPU seconds. A difference of two readings is what happened between them."""

    step_seconds: float = 0.0
    step_calls: float = 0.0
    cpu_seconds: float = 0.0
    validate_seconds: float = 0.0  # the validating step's, over the same CREATEs

    def __add__(self, other: Counters) -> Counters:
        return Counters(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: Counters) -> Counters:
        return Counters(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


def apiserver_counters(client: ApiClient) -> Counters:
    text = client.get_text("/metrics")
    return Counters(
        metric_sum(text, MUTATING_STEP + "_sum", MUTATING_STEP_LABELS),
        metric_sum(text, MUTATING_STEP + "_count", MUTATING_STEP_LABELS),
        metric_sum(text, CPU, {}),
        metric_sum(text, MUTATING_STEP + "_sum", VALIDATING_STEP_LABELS),
    )


def run_interleaved(
    name: str,
    rounds: int,
    arms: Mapping[str, Callable[[], None]],
    batch: Callable[[], tuple[dict[int, list[float]], Counters]],
    what: str,
    settle: float = SETTLE_SECONDS,
) -> tuple[Samples, dict[str, Counters]]:
    """`rounds` batches of every arm (the first is the baseline), each `settle` seconds after
    its switch; the samples per arm and concurrency, and kube-apiserver's counters per arm.
    `what` says what a batch is, for the progress lines."""
    samples: Samples = {arm: {} for arm in arms}
    counters = {arm: Counters() for arm in arms}
    order: list[str] = []
    for i in range(rounds):
        order += list(arms) if i % 2 == 0 else list(reversed(list(arms)))
    for i, arm in enumerate(order):
        arms[arm]()
        time.sleep(settle)
        progress(f"[{name}] batch {i + 1}/{len(order)}: {arm}, {what}")
        values, batch_counters = batch()
        for concurrency, latencies in values.items():
            samples[arm].setdefault(concurrency, []).extend(latencies)
        counters[arm] += batch_counters
    return samples, counters


def report(name: str, samples: Samples, counters: Mapping[str, Counters]) -> dict[str, Ratios]:
    """Print each arm against the first (the baseline) per concurrency, then kube-apiserver's
    mutating admission step and CPU per create per arm; return the ratios per arm."""
    baseline, *others = samples
    ratios: dict[str, Ratios] = {}
    for arm in others:
        ratios[arm] = {}
        for n in sorted(samples[baseline]):
            base, ours = samples[baseline][n], samples[arm][n]
            b50, b99 = percentile(base, 0.5) * 1e3, percentile(base, 0.99) * 1e3
            p50, p99 = percentile(ours, 0.5) * 1e3, percentile(ours, 0.99) * 1e3
            ratios[arm][n] = (p50 / b50, p99 / b99)
            print(
                f"{name}, {arm} against {baseline}, {n} creator(s): "
                f"{baseline} p50 {b50:.2f} ms p99 {b99:.2f} ms (n={len(base)}); "
                f"{arm} p50 {p50:.2f} ms p99 {p99:.2f} ms (n={len(ours)}); "
                f"ratio p50 {p50 / b50:.2f}, p99 {p99 / b99:.2f}"
            )
    base = counters[baseline]
    base_cpu = base.cpu_seconds / max(base.step_calls, 1)
    for arm, c in counters.items():
        creates = max(c.step_calls, 1)
        print(
            f"{name}, {arm}: kube-apiserver per create: mutating admission step "
            f"{c.step_seconds / creates * 1e3:.3f} ms, "
            f"validating {c.validate_seconds / creates * 1e3:.3f} ms, "
            f"CPU {c.cpu_seconds / creates * 1e3:.3f} ms "
            f"(x{c.cpu_seconds / creates / base_cpu:.2f} the {baseline}'s; {c.step_calls:.0f} creates)"
        )
    return ratios
