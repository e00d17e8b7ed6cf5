"""A runner returning the simulate JSON, and readers of its answer. (The objects come from
tests/builders.py.)"""

from __future__ import annotations

from typing import Any

from priogate.preemption.engine import simulate
from priogate.preemption.snapshot import build_snapshot


def run(objects: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    explain = options.get("explain", False)
    return simulate(build_snapshot(objects), **options).to_json(explain=explain)


def decided(result: dict[str, Any]) -> dict[str, tuple[str | None, list[str]]]:
    """preemptor -> (nominated node, victims)."""
    return {d["preemptor"]: (d["nominatedNode"], d["victims"]) for d in result["decisions"]}


def unresolved(result: dict[str, Any]) -> dict[str, str]:
    return {u["preemptor"]: u["reason"] for u in result["unresolved"]}
