"""Logging configuration: lines go to the stderr of the moment, never to a stream replaced and closed since."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator

import pytest
import structlog

from core.logging import configure_logging


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def test_a_stderr_replaced_and_closed_after_configuration_is_never_written_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CLI run in-process (tests, wrappers) configures logging while stderr is a temporary stream that is
    later closed: the next log line goes to the current stderr instead of raising on the closed one."""
    temporary = io.StringIO()
    monkeypatch.setattr(sys, "stderr", temporary)
    configure_logging("info", "json")
    temporary.close()
    current = io.StringIO()
    monkeypatch.setattr(sys, "stderr", current)

    structlog.get_logger("test").warning("after_close", node="gpu-node-07")

    line = json.loads(current.getvalue().strip())
    assert (line["event"], line["node"], line["level"]) == ("after_close", "gpu-node-07", "warning")


def test_lines_below_the_level_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = io.StringIO()
    monkeypatch.setattr(sys, "stderr", sink)
    configure_logging("warning", "json")
    structlog.get_logger("test").info("quiet")
    structlog.get_logger("test").error("loud")
    assert [json.loads(line)["event"] for line in sink.getvalue().splitlines()] == ["loud"]
