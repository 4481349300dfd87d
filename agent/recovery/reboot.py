"""Reboot requests and the boot id that tells when the node came back.

With kured (the default) the agent writes kured's sentinel file; kured then drains, reboots and uncordons
the node at a time its own schedule and lock allow. With ``mode: command`` the agent runs a configured
command (no shell). Either way the planner remembers the boot id from before the request; another boot id
later means the node came back.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from agent.recovery.commands import CommandOutcome, run_command
from agent.recovery.settings import RebootSettings


def read_boot_id(path: Path) -> str | None:
    """The kernel's boot id (changes on every boot); None when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def request_reboot(settings: RebootSettings, incident_id: str) -> CommandOutcome:
    """Ask for a reboot as configured; ``off`` is refused (the planner never asks then)."""
    if settings.mode == "off":
        return CommandOutcome(ok=False, detail="reboots are off (recovery.reboot.mode)")
    if settings.mode == "command":
        return run_command(settings.command, settings.timeout_s)
    return _write_sentinel(settings.sentinel_path, incident_id)


def _write_sentinel(path: Path, incident_id: str) -> CommandOutcome:
    try:
        path.write_text(f"gpuhealth {incident_id}\n", encoding="utf-8")
    except OSError as exc:
        return CommandOutcome(ok=False, detail=f"cannot write {path}: {exc.strerror or exc}")
    return CommandOutcome(ok=True, detail=f"reboot requested: {path} written for kured")


def clear_sentinel(path: Path) -> None:
    """Remove a sentinel left after the node came back (on a real node /var/run is emptied by the boot)."""
    with contextlib.suppress(OSError):  # kured, or the next boot, clears it
        path.unlink(missing_ok=True)
