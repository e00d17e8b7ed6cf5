"""PreemptionPolicy from its flags: every field, its default and its validation."""

from __future__ import annotations

import argparse

import pytest

from priogate.preemption.policy import DEFAULT_POLICY, PreemptionPolicy, add_arguments, from_arguments


def parse(argv: list[str]) -> PreemptionPolicy:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_arguments(parser.parse_args(argv))


def test_defaults_are_kube_scheduler() -> None:
    policy = parse([])
    assert policy == DEFAULT_POLICY == PreemptionPolicy()
    assert policy.opt_out_mode == "hard"
    assert not policy.gang_aware_victims and not policy.victim_classes and not policy.qos_order
    assert policy.start_delay == 0.0
    assert policy.victim_selection == ("kube-scheduler",) and policy.kube_scheduler_victims
    assert policy.pdb_mode == "best-effort"


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--opt-out-mode", "soft"], "opt_out_mode", "soft"),
        (["--gang-aware-victims"], "gang_aware_victims", True),
        (["--no-gang-aware-victims"], "gang_aware_victims", False),
        (["--victim-classes"], "victim_classes", True),
        (["--qos-order"], "qos_order", True),
        (["--preemption-start-delay", "30"], "start_delay", 30.0),
        (["--preemption-start-delay", "0.5"], "start_delay", 0.5),
        (["--victim-selection", "single,multiple"], "victim_selection", ("single", "multiple")),
        (["--victim-selection", "multiple"], "victim_selection", ("multiple",)),
        (
            ["--victim-selection", " single , kube-scheduler "],
            "victim_selection",
            ("single", "kube-scheduler"),
        ),
        (["--single-victim-deviation", "5"], "single_victim_deviation", 5.0),
        (["--max-victims", "3"], "max_victims", 3),
        (["--pdb-mode", "strict"], "pdb_mode", "strict"),
        (["--pdb-mode", "best-effort"], "pdb_mode", "best-effort"),
    ],
)
def test_each_flag_sets_its_field(argv: list[str], field: str, value: object) -> None:
    policy = parse(argv)
    assert getattr(policy, field) == value
    # ... and nothing else
    others = {f: getattr(policy, f) for f in PreemptionPolicy.__dataclass_fields__ if f != field}
    assert others == {f: getattr(DEFAULT_POLICY, f) for f in others}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--preemption-start-delay", "-1"], "start delay"),
        (["--preemption-start-delay", "inf"], "start delay"),
        (["--preemption-start-delay", "nan"], "start delay"),
        (["--victim-selection", "largest"], "strategy must be one of"),
        (["--victim-selection", "single,single"], "twice"),
        (["--victim-selection", ","], "at least one"),
        (["--single-victim-deviation", "-5"], "deviation"),
        (["--max-victims", "-1"], "max victims"),
    ],
)
def test_bad_values_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(argv)


@pytest.mark.parametrize(
    "argv", [["--pdb-mode", "lenient"], ["--opt-out-mode", "never"], ["--max-victims", "two"]]
)
def test_argparse_refuses_unknown_choices(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pdb_mode": "strictly"},
        {"opt_out_mode": "maybe"},
        {"max_victims": True},
        {"max_victims": 1.5},
        {"victim_selection": ()},
    ],
)
def test_constructor_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PreemptionPolicy(**kwargs)
