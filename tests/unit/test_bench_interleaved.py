"""The interleaving and report every arm of bench-pod-create is measured by (bench/interleaved.py)."""

from __future__ import annotations

import pytest

from bench.interleaved import MUTATING_STEP, Counters, percentile, report, run_interleaved
from localcluster.api import metric_sum


@pytest.mark.parametrize(
    ("rounds", "order"),
    [
        (1, "ABC"),
        (2, "ABCCBA"),
        (3, "ABCCBAABC"),
    ],
)
def test_arms_alternate_direction_each_round_so_drift_falls_on_all(rounds: int, order: str) -> None:
    switched: list[str] = []
    arms = {name: (lambda name=name: switched.append(name)) for name in "ABC"}

    def batch() -> tuple[dict[int, list[float]], Counters]:
        arm = switched[-1]
        return {1: [float(ord(arm))]}, Counters(step_seconds=1.0, step_calls=2.0, cpu_seconds=3.0)

    samples, counters = run_interleaved("t", rounds, arms, batch, "batch", settle=0)
    assert "".join(switched) == order
    for arm in "ABC":
        assert samples[arm][1] == [float(ord(arm))] * order.count(arm)
        assert counters[arm] == Counters(
            1.0 * order.count(arm), 2.0 * order.count(arm), 3.0 * order.count(arm)
        )


def test_counters_subtract_to_what_happened_between_two_readings() -> None:
    before, after = Counters(1.0, 10, 5.0), Counters(1.5, 14, 5.25)
    assert after - before == Counters(0.5, 4, 0.25)
    assert Counters() + (after - before) == after - before


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([3.0, 1.0, 2.0], 0.5, 2.0), ([1.0, 2.0, 3.0, 4.0], 0.99, 4.0), ([5.0], 0.5, 5.0)],
)
def test_percentile_is_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_report_gives_each_arm_against_the_first(capsys: pytest.CaptureFixture[str]) -> None:
    samples = {"base": {8: [1.0] * 10}, "ours": {8: [1.5] * 10}, "floor": {8: [1.2] * 10}}
    counters = {
        "base": Counters(0.1, 100, 2.0),
        "ours": Counters(0.5, 100, 3.0, 0.2),
        "floor": Counters(0.3, 100, 2.5),
    }
    ratios = report("mode", samples, counters)
    assert ratios == {"ours": {8: pytest.approx((1.5, 1.5))}, "floor": {8: pytest.approx((1.2, 1.2))}}
    out = capsys.readouterr().out
    assert (
        "mode, ours: kube-apiserver per create: mutating admission step 5.000 ms, validating 2.000 ms,"
        " CPU 30.000 ms (x1.50" in out
    )


def test_an_unlabelled_sample_is_read_as_well_as_a_labelled_one() -> None:
    text = (
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total 12.5\n"
        f'{MUTATING_STEP}_sum{{operation="CREATE",rejected="false",type="admit"}} 0.25\n'
        f'{MUTATING_STEP}_sum{{operation="UPDATE",rejected="false",type="admit"}} 9\n'
    )
    assert metric_sum(text, "process_cpu_seconds_total", {}) == 12.5
    labels = {"operation": "CREATE", "type": "admit"}
    assert metric_sum(text, f"{MUTATING_STEP}_sum", labels) == 0.25
