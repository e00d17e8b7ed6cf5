"""priogate.clock: the two forms written are read back exactly; anything else is refused."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from priogate.clock import MICRO_TIME, RFC3339, micro_time, parse_time, rfc3339

MOMENTS = st.datetimes(
    min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(9999, 12, 31), timezones=st.just(dt.UTC)
)


@given(MOMENTS)
def test_both_written_forms_read_back_as_strptime_reads_them(moment: dt.datetime) -> None:
    for text, layout in ((micro_time(moment), MICRO_TIME), (rfc3339(moment), RFC3339)):
        assert parse_time(text) == dt.datetime.strptime(text, layout).replace(tzinfo=dt.UTC)
    assert parse_time(micro_time(moment)) == moment


@pytest.mark.parametrize(
    "text",
    [
        "",
        "x" * 27,
        "2026-01-01T00:00:0aZ",
        "2026-01-01 00:00:00Z",  # fromisoformat would take a space
        "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:00.00000aZ",
        "2026-01-01T00:00:00.000-05Z",  # fromisoformat would read "-05" as an offset
        "2026-01-01T00:00:00.0000+1Z",
        "2026-13-01T00:00:00Z",
        "2026-01-01T24:00:00.000000Z",
    ],
)
def test_other_forms_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)
