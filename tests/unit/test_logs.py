"""priogate.logs: a logged value with control, bidi or separator characters stays on its one JSON
line, none of them raw, and reads back exactly."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given

from priogate.logs import processors
from tests.unit.test_text import ANY_TEXT, FORBIDDEN


def _render(event: str, **values: Any) -> str:
    out: Any = {"event": event, **values}
    for processor in processors():
        out = processor(None, "warning", out)
    assert isinstance(out, str)
    return out


def test_a_forged_line_stays_in_its_value():
    key = "cpu\n\x1b[2J\x1b[H State: Running\u202e"
    line = _render("podgroup status", podgroup="ns/g", resource=key)
    assert "\n" not in line and "\x1b" not in line and "\u202e" not in line
    assert '"resource": "cpu\\n\\u001b[2J\\u001b[H State: Running\\u202e"' in line
    assert json.loads(line)["resource"] == key


@given(ANY_TEXT)
def test_any_value_is_one_line_without_a_raw_forbidden_character(value: str) -> None:
    line = _render("e", value=value)
    assert not FORBIDDEN & set(line)
    assert json.loads(line)["value"] == value
