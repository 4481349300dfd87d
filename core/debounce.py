"""Debounce of the node state machine: how many readings make a fault, and how many a recovery.

Kept in the shared vocabulary because the agent's state machine, the behaviour profiles
(``remediation/plan/profiles.py``) and the replay read the same model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

CHECK_GROUPS: dict[str, frozenset[str]] = {"memory": frozenset({"ecc", "row_remap", "retired_pages"})}
"""Names that stand for several check families in ``immediate_checks`` (``memory`` = checks/memory.py)."""


class DebounceConfig(BaseModel):
    """How many readings make a fault, and how many make a recovery."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    polled_bad_readings: int = Field(
        default=3, ge=1, description="Consecutive bad readings of one code before a polled signal acts."
    )
    clean_readings_to_recover: int = Field(
        default=3,
        ge=1,
        description="Consecutive clean readings before an incident closes (or degraded ends).",
    )
    min_dwell_s: float = Field(
        default=300.0,
        ge=0.0,
        description="Seconds an incident stays open after its last bad reading, however many clean ones.",
    )
    immediate_checks: frozenset[str] = Field(
        # dcgm_exporter: its out-of-service findings are memory faults and XIDs judged by the same checks as
        # NVML's, or DCGM health-watch failures that DCGM has already filtered over its own sampling window.
        default=frozenset({"xid", "presence", "memory", "recovery_action", "dcgm_diag", "dcgm_exporter"}),
        validate_default=True,
        description="Check families whose out-of-service findings act at once (fatal events); "
        "'memory' stands for ecc, row_remap and retired_pages.",
    )
    unknown_readings: int = Field(
        default=1,
        ge=1,
        description="Consecutive unknown readings before a node without incident shows unknown.",
    )

    @field_validator("immediate_checks")
    @classmethod
    def _expand_groups(cls, value: frozenset[str]) -> frozenset[str]:
        expanded: set[str] = set()
        for name in value:
            expanded |= CHECK_GROUPS.get(name, frozenset({name}))
        return frozenset(expanded)
