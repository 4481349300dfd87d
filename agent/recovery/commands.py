"""Run one recovery command (GPU reset, reboot) without a shell, with a timeout, as one line of outcome."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from core.child_env import child_environment

OUTPUT_TAIL = 300  # characters of the command's output kept for the timeline


@dataclass(frozen=True)
class CommandOutcome:
    """What one command did: ``ok`` only for exit status 0; ``detail`` is one line for the timeline."""

    ok: bool
    detail: str
    exit_code: int | None = None  # None: it never ran, or it was killed at the timeout


def fill(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """The command line with ``{name}`` placeholders replaced (plain replacement: no format mini-language,
    so a brace elsewhere in an argument stays as it is)."""
    argv = []
    for argument in template:
        filled = argument
        for name, value in values.items():
            filled = filled.replace("{" + name + "}", value)
        argv.append(filled)
    return argv


def run_command(argv: Sequence[str], timeout_s: float) -> CommandOutcome:
    """Run ``argv`` (never through a shell); a missing binary, a timeout or a non-zero exit is not ok."""
    if not argv:
        return CommandOutcome(ok=False, detail="no command configured")
    name = PurePath(argv[0]).name  # the tool, not the install path, in the timeline
    try:
        done = subprocess.run(  # argv from the agent's settings, no shell
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
            env=child_environment(),  # never the agent's tokens
        )
    except FileNotFoundError:
        return CommandOutcome(ok=False, detail=f"{name}: command not found")
    except subprocess.TimeoutExpired:
        return CommandOutcome(ok=False, detail=f"{name}: timed out after {timeout_s:g} s (killed)")
    except OSError as exc:
        return CommandOutcome(ok=False, detail=f"{name}: cannot run: {exc.strerror or exc}")
    output = _one_line(done.stdout + " " + done.stderr)
    if done.returncode != 0:
        tail = f": {output}" if output else ""
        return CommandOutcome(False, f"{name} exited with {done.returncode}{tail}", done.returncode)
    return CommandOutcome(True, f"{name} succeeded" + (f": {output}" if output else ""), 0)


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= OUTPUT_TAIL else "…" + flat[-OUTPUT_TAIL:]
