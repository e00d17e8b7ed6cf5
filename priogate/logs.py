"""Structured JSON logs (structlog over the standard library), one line per event."""

from __future__ import annotations

import logging
import sys

import structlog
from structlog.typing import Processor


def processors() -> list[Processor]:
    """The chain every priogate log line goes through.

    Values logged can be tenant text (an object's key, a refusal's reason). The JSON renderer
    keeps a line a line: json.dumps, with its default ensure_ascii, writes every control and
    non-ASCII character as a \\uXXXX escape, so no raw ESC, newline or bidi override reaches the
    log stream, and a reader gets the exact value back by parsing the line. An escaping
    processor (priogate.text) before it would escape twice and lose that value.
    """
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        structlog.processors.JSONRenderer(sort_keys=False),
    ]


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(stream=sys.stderr, level=level.upper(), format="%(message)s")
    structlog.configure(
        processors=processors(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
