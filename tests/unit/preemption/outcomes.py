"""The engine's typed outcomes for builder-made objects: what scenario tests assert on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from priogate.preemption.engine import decide_for_group, simulate
from priogate.preemption.outcome import Outcome
from priogate.preemption.snapshot import build_snapshot


def outcomes(objects: Iterable[Mapping[str, Any]], **options: Any) -> tuple[Outcome, ...]:
    """Every preemptor's outcome, in decision order (`python -m controller simulate`'s run)."""
    return simulate(build_snapshot(objects), **options).outcomes


def group_outcome(objects: Iterable[Mapping[str, Any]], group_key: str, **options: Any) -> Outcome:
    """One PodGroup's outcome from `decide_for_group`, the controller's entry point. The
    scenarios using it have the group as the first preemptor, so simulate's run must reach the
    very same outcome: the controller and the CLI cannot drift apart."""
    snapshot = build_snapshot(objects)
    outcome = decide_for_group(snapshot, group_key, **options)
    run = simulate(snapshot, **options).outcomes
    assert [o for o in run if o.preemptor == outcome.preemptor] == [outcome]
    return outcome


def decided(found: Iterable[Outcome]) -> dict[str, tuple[str | None, list[str]]]:
    """preemptor -> (nominated node, victims), for the outcomes that preempt."""
    return {o.preemptor: (o.node, [v.key for v in o.victims]) for o in found if o.status == "preempt"}


def unresolved(found: Iterable[Outcome]) -> dict[str, str]:
    """preemptor -> why it cannot be placed."""
    return {o.preemptor: o.reason for o in found if o.status == "unresolved"}
