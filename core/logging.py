"""structlog configuration, done once per process.

Logs go to stderr (stdout is reserved for command output such as ``--json``): JSON lines when stderr is not
a terminal (collected by the node's log pipeline), a readable console format when it is.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Literal

import structlog

LogFormat = Literal["auto", "json", "console"]


class StderrLogger:
    """Prints each line to the ``sys.stderr`` of the moment, not the one seen when logging was configured:
    whoever replaced it since (a test harness capturing output, a wrapper redirecting it) gets the lines, and
    a stream closed meanwhile is never written to."""

    _lock = threading.Lock()

    def msg(self, message: str) -> None:
        with self._lock:
            print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = error = err = critical = exception = fatal = failure = msg


def _stderr_logger(*_args: Any) -> StderrLogger:
    return StderrLogger()


def configure_logging(level: str = "warning", fmt: LogFormat = "auto") -> None:
    """Configure structlog and the standard library's root logger to the same level and sink."""
    numeric_level = logging.getLevelNamesMapping().get(level.upper())
    if numeric_level is None:
        raise ValueError(f"unknown log level {level!r} (use debug, info, warning or error)")
    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if use_console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric_level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
