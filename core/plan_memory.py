"""What the planner must remember between ticks (and across agent restarts) to keep its promises.

The planner is pure: everything it needs to know about its own past — which incident it cordoned for, which
incidents a human overrode, which Events it already announced — lives in this small frozen model, which the
agent persists with the state machine's counters (``agent.state.machine.AgentState``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.recovery_record import RecoveryRecord

MAX_REMEMBERED = 64
"""How many incident ids / event keys each list keeps: old entries fall off, newest kept (bounded state)."""


class RemediationMemory(BaseModel):
    """The planner's own record; every list is bounded to ``MAX_REMEMBERED`` entries, oldest dropped first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    active_incident: str | None = Field(
        default=None,
        description="The incident last seen open (kept after it closes, to announce the recovery).",
    )
    cordoned_for: str | None = Field(
        default=None, description="The incident we cordoned the node for, while our cordon stands."
    )
    human_uncordoned: tuple[str, ...] = Field(
        default=(), description="Incidents whose cordon a human lifted: never re-cordoned."
    )
    human_released: tuple[str, ...] = Field(
        default=(), description="Incidents a human released: never re-tainted nor re-cordoned."
    )
    emitted_events: tuple[str, ...] = Field(
        default=(), description="Keys of the Events already planned, so none is planned twice."
    )
    drained: tuple[str, ...] = Field(
        default=(), description="Incidents whose drain was started: never drained twice."
    )
    partially_drained: tuple[str, ...] = Field(
        default=(), description="Incidents whose drain was limited to their GPUs (policy.partial_drain)."
    )
    recovery: RecoveryRecord | None = Field(
        default=None, description="The latest incident's reset / reboot / validation (agent/recovery/)."
    )

    def overridden(self, incident_id: str) -> bool:
        """True when a human released the node during this incident."""
        return incident_id in self.human_released

    def was_drained(self, incident_id: str) -> bool:
        """True when a drain was started for this incident (whatever its outcome)."""
        return incident_id in self.drained

    def uncordoned_by_human(self, incident_id: str) -> bool:
        """True when a human lifted our cordon during this incident."""
        return incident_id in self.human_uncordoned


def remember(entries: tuple[str, ...], entry: str) -> tuple[str, ...]:
    """``entries`` with ``entry`` appended once, trimmed to the newest ``MAX_REMEMBERED``."""
    if entry in entries:
        return entries
    return (*entries, entry)[-MAX_REMEMBERED:]
