"""Rendering, kubectl's way: tables for people, JSON or YAML for scripts. Pure.

Text for people shows object-derived strings (condition messages, Event notes, resource
names) through shown(): tenants write them, and a control character in one would drive the
reader's terminal (priogate.text). JSON and YAML need nothing more: json.dumps (ensure_ascii)
and yaml.safe_dump (allow_unicode off) write every such character as an escape."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import yaml

from priogate.resources import format_quantity
from priogate.text import escape_untrusted

FORMATS = ("json", "yaml")
NONE = "<none>"  # what kubectl prints for an empty cell
# kubectl's table printer writes through a tabwriter with minimum width 6 and padding 3
# (k8s.io/cli-runtime/pkg/printers/tabwriter.go): columns are the widest cell plus 3 spaces.
_PADDING = 3
_MIN_WIDTH = 6


def shown(text: object) -> str:
    """An object-derived string as a terminal may show it: its control, bidi and line-separator
    characters escaped (priogate.text.escape_untrusted)."""
    return escape_untrusted(str(text))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Upper-case headers, left-aligned columns, the last one unpadded; ends with a newline.
    Cells are escaped (shown) before they are measured, so a forged newline cannot start a row."""
    cells = [[h.upper() for h in headers], *[[shown(c) if c != "" else NONE for c in row] for row in rows]]
    widths = [max(_MIN_WIDTH, max(len(row[i]) for row in cells) + _PADDING) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("".join(padded).rstrip())
    return "\n".join(lines) + "\n"


def render(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=4) + "\n"  # kubectl indents JSON by 4
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    raise ValueError(f"unable to match a printer suitable for the output format {fmt!r}")


def quantity(value: Fraction | None) -> str:
    return NONE if value is None else format_quantity(value)


def quantities(amounts: Mapping[str, Fraction]) -> dict[str, str]:
    return {name: format_quantity(amount) for name, amount in sorted(amounts.items())}


def human_duration(seconds: float) -> str:
    """kubectl's AGE column (k8s.io/apimachinery/pkg/util/duration.HumanDuration)."""
    if math.isnan(seconds) or seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y" if days % 365 == 0 else f"{days // 365}y{days % 365}d"
    return f"{hours // 24 // 365}y"
