"""`gpuhealth demo`, the README's first command, through the installed console script."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_the_demo_plays_every_scene_and_every_expectation_holds(run_cli: RunCli) -> None:
    result = run_cli("demo", "--json")
    summary = json.loads(result.stdout)
    assert result.returncode == 0, result.stderr
    assert summary["passed"] is True
    names = [entry["name"] for entry in summary["expectations"]]
    assert any("XID 79" in name for name in names)
    assert any("XID 13" in name for name in names)
    assert any("row remap" in name for name in names)
    assert any("no NVIDIA driver" in name for name in names)
    assert all(entry["passed"] for entry in summary["expectations"])


def test_the_demo_shows_its_progress_to_people(run_cli: RunCli) -> None:
    result = run_cli("demo")
    assert result.returncode == 0
    assert "expectations held" in result.stdout
    assert "demo-h100-01" in result.stdout
