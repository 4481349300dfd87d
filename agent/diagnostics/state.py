"""What deep diagnostics remember across agent restarts, in its own small file next to the state file.

* ``next_due_at`` — when the scheduled run is next due (wall clock, so a restart keeps the week's rhythm);
* ``running`` — the run in progress: a restarted agent finds it here, knows the run died with it, says so
  in the timeline, and takes the node out of ``testing``;
* ``failed_findings`` / ``failed_incident`` — a failed run's ``DCGM_DIAG_*`` findings, held while the
  incident they opened stays open (a diagnostic is not re-polled: its verdict must not fade by itself).

A missing or unreadable file is a fresh start (logged): losing it costs one schedule slot, never a fault.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.findings import Finding

log = structlog.get_logger(__name__)


class RunningDiag(BaseModel):
    """A diagnostic in progress."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    level: int
    started_at: datetime
    requested_by: str


class DiagnosticsState(BaseModel):
    """The persisted part of ``agent.diagnostics.runner.DiagnosticsRunner``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    next_due_at: datetime | None = None
    running: RunningDiag | None = None
    failed_findings: list[Finding] = Field(default_factory=list)
    failed_incident: str | None = None


class DiagnosticsStore:
    """Loads and atomically saves :class:`DiagnosticsState` (write to a temporary file, then rename)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> DiagnosticsState:
        try:
            return DiagnosticsState.model_validate_json(self.path.read_bytes())
        except FileNotFoundError:
            return DiagnosticsState()
        except (OSError, ValidationError) as exc:
            log.warning("diagnostics_state_unreadable", path=str(self.path), error=type(exc).__name__)
            return DiagnosticsState()

    def save(self, state: DiagnosticsState) -> None:
        """Write the state; an unwritable disk is logged, never raised (the loop must go on)."""
        try:
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".diagnostics-")
            with os.fdopen(handle, "wb") as out:
                out.write(state.model_dump_json().encode())
                out.flush()
                os.fsync(out.fileno())
            Path(temporary).replace(self.path)
        except OSError as exc:
            log.error("diagnostics_state_not_saved", path=str(self.path), error=exc.strerror or str(exc))
