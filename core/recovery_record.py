"""What the planner remembers of one incident's recovery: attempts made, where it stands, the boot id.

Kept in ``RemediationMemory.recovery`` and so persisted with the state file: a node that reboots comes back
knowing which incident it rebooted for, from which boot, and how many attempts were spent.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class RecoveryPhase(StrEnum):
    """Where the recovery of one incident stands (the planner plans from it; results move it on)."""

    READY = "ready"  # drain ended; the next reset or reboot attempt may be planned (after the backoff)
    REBOOTING = "rebooting"  # a reboot was requested; waiting for another boot id, until the deadline
    VALIDATING = "validating"  # reset done or node back: the Validate step is due, or runs in the background
    TESTING = "testing"  # validation passed its diagnostic; clean readings now release the node
    FAILED = "failed"  # validation failed or attempts ran out: the incident escalated to replace


class RecoveryRecord(BaseModel):
    """The recovery of one incident."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    incident_id: str = Field(description="The incident this recovery belongs to.")
    phase: RecoveryPhase = Field(default=RecoveryPhase.READY, description="Where the recovery stands.")
    attempts: int = Field(default=0, ge=0, description="Reset or reboot attempts made so far.")
    boot_id: str | None = Field(
        default=None, description="The boot id when the reboot was requested (another one: node is back)."
    )
    attempted_at: datetime | None = Field(
        default=None,
        description="When the latest reset or reboot attempt was planned: the backoff before the next "
        "attempt and the deadline of a requested reboot count from it.",
    )
    validation_starts: int = Field(
        default=0,
        ge=0,
        description="Validation diagnostics started so far; an agent killed mid-run starts another, so "
        "past the limit the incident escalates instead of validating forever.",
    )
    detail: str = Field(default="", description="The last outcome, one line.")
