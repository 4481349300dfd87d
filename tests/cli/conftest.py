"""Run the installed ``gpuhealth`` console script as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

GPUHEALTH = Path(sys.executable).parent / "gpuhealth"

RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_cli() -> RunCli:
    assert GPUHEALTH.exists(), f"console script not installed at {GPUHEALTH} (pip install -e .)"

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
        return subprocess.run(
            [str(GPUHEALTH), *args], capture_output=True, text=True, timeout=60, env=full_env, check=False
        )

    return run


@pytest.fixture(autouse=True)
def _logging_as_before() -> Iterator[None]:
    """A test that runs ``gpuhealth.cli.main.main`` in this process configures logging onto its captured
    stderr; later tests (which capture log lines themselves) get the defaults back."""
    yield
    structlog.reset_defaults()
