"""Tables, durations and formats as kubectl prints them."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import yaml

from kubectl_priogate.output import human_duration, quantity, render, table


@pytest.mark.parametrize(
    ("headers", "rows", "expected"),
    [
        # widest cell + 3 spaces; the last column is not padded
        (
            ["name", "cpu"],
            [["a", "1"], ["long-name", "500m"]],
            "NAME        CPU\na           1\nlong-name   500m\n",
        ),
        # a column is at least 6 wide (kubectl's tabwriter minwidth)
        (["a", "b"], [["x", "y"]], "A     B\nx     y\n"),
        # an empty cell is <none>, as kubectl prints it
        (["name", "node"], [["p", ""]], "NAME   NODE\np      <none>\n"),
        # no rows: the headers alone
        (["quota"], [], "QUOTA\n"),
        # a cell's control characters are escaped, then measured: no forged row, columns aligned
        (
            ["resource", "hard"],
            [["cpu\n\x1b[2Jfake", "1"], ["cpu", "2"]],
            "RESOURCE           HARD\ncpu\\n\\x1b[2Jfake   1\ncpu                2\n",
        ),
    ],
)
def test_table(headers, rows, expected):
    assert table(headers, rows) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-0.5, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60 * 5, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (50 * 3600, "2d2h"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_matches_kubectl_age(seconds, expected):
    assert human_duration(seconds) == expected


def test_quantity_none_and_canonical():
    assert quantity(None) == "<none>"
    assert quantity(Fraction(3, 2)) == "1500m"
    assert quantity(Fraction(2 * 1024**3)) == "2Gi"


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_render_round_trips(fmt):
    data = {"b": [1, {"c": "x"}], "a": None}
    text = render(data, fmt)
    assert (json.loads(text) if fmt == "json" else yaml.safe_load(text)) == data
    if fmt == "yaml":
        assert text.index("b:") < text.index("a:"), "keys keep their order"


def test_render_refuses_other_formats():
    with pytest.raises(ValueError, match="wide"):
        render({}, "wide")
