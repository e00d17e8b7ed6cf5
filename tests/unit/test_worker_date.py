"""The worker's Date header: formatted once per second, as gunicorn would format it."""

from __future__ import annotations

import email.utils
import time

from gunicorn import util

from webhook import gunicorn_parts as worker


def test_gunicorn_formats_its_date_header_through_the_cache():
    assert util.http_date is worker._cached_http_date


def test_the_cached_date_is_gunicorns_format_and_current():
    before = int(time.time())
    text = util.http_date()
    after = int(time.time())
    parsed = int(email.utils.parsedate_to_datetime(text).timestamp())
    assert before <= parsed <= after
    assert text == worker._format_http_date(parsed)


def test_an_explicit_timestamp_is_formatted_not_cached():
    assert util.http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert util.http_date(86400) == "Fri, 02 Jan 1970 00:00:00 GMT"
