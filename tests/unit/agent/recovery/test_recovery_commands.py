"""The recovery command runner, for real: exit status, a timeout that kills, a missing binary, no shell; and
the placeholder filling of command templates."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from waiting import HANG_GUARD_S

from agent.recovery.commands import fill, run_command


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_exit_status_zero_is_ok_and_output_is_kept_on_one_line() -> None:
    outcome = run_command(python("print('reset\\ndone')"), HANG_GUARD_S)

    assert outcome.ok and outcome.exit_code == 0
    assert outcome.detail.endswith("succeeded: reset done")


def test_non_zero_exit_is_a_failure_naming_the_status_and_the_output() -> None:
    outcome = run_command(python("import sys; sys.stderr.write('GPU in use'); sys.exit(3)"), HANG_GUARD_S)

    assert not outcome.ok and outcome.exit_code == 3
    assert "exited with 3: GPU in use" in outcome.detail


def test_a_command_running_past_its_timeout_is_killed_and_fails(tmp_path: Path) -> None:
    """A hung reset must not hang the agent: killed at the timeout, reported as timed out."""
    marker = tmp_path / "still-running"
    code = f"import time, pathlib; time.sleep(30); pathlib.Path({str(marker)!r}).touch()"
    started = time.monotonic()

    outcome = run_command(python(code), 0.5)

    assert not outcome.ok and outcome.exit_code is None
    assert "timed out after 0.5 s" in outcome.detail
    assert time.monotonic() - started < HANG_GUARD_S
    assert not marker.exists()


def test_a_missing_binary_is_one_clear_line() -> None:
    outcome = run_command(["gpuhealth-no-such-reset-tool", "-i", "0"], HANG_GUARD_S)

    assert not outcome.ok
    assert outcome.detail == "gpuhealth-no-such-reset-tool: command not found"


def test_a_file_that_is_not_executable_cannot_run(tmp_path: Path) -> None:
    script = tmp_path / "reset.sh"
    script.write_text("#!/bin/sh\nexit 0\n")

    outcome = run_command([str(script)], HANG_GUARD_S)

    assert not outcome.ok and "cannot run" in outcome.detail


def test_arguments_reach_the_command_unchanged_by_any_shell(tmp_path: Path) -> None:
    """Shell syntax in an argument stays a literal argument: nothing is expanded or run."""
    outcome = run_command([*python("import sys; print(sys.argv[1:])"), "$(touch x); *"], HANG_GUARD_S)

    assert outcome.ok and "['$(touch x); *']" in outcome.detail


def test_empty_command_is_refused() -> None:
    assert run_command([], HANG_GUARD_S).detail == "no command configured"


def test_fill_replaces_named_placeholders_only() -> None:
    template = ["nvidia-smi", "--gpu-reset", "-i", "{index}", "--uuid={uuid}", "{other}", "{{index}}"]

    assert fill(template, {"index": "3", "uuid": "GPU-1"}) == [
        "nvidia-smi",
        "--gpu-reset",
        "-i",
        "3",
        "--uuid=GPU-1",
        "{other}",
        "{3}",
    ]
