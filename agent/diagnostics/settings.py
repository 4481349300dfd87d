"""Settings of deep diagnostics (``dcgmi diag``): the scheduled run and on-demand requests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

WEEK_S = 7 * 24 * 3600.0


class DiagnosticsSettings(BaseModel):
    """Scheduled ``dcgmi diag`` on an idle node, and on-demand runs asked through the aggregator."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="Run dcgmi diag on a schedule (on idle, healthy nodes).")
    on_demand: bool = Field(
        default=True, description="Run the diagnostics a human asks for (gpuhealth diag NODE)."
    )
    every_s: float = Field(default=WEEK_S, gt=0, description="Seconds between two scheduled runs.")
    level: int = Field(default=1, ge=1, le=4, description="dcgmi diag level of a scheduled run (1-4).")
    timeout_s: float = Field(
        default=3600.0, gt=0, description="Longest a run may take before it counts as not run."
    )
    only_when_idle: bool = Field(
        default=True, description="Skip a scheduled run while a pod on the node uses GPUs."
    )
    busy_retry_s: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds until a scheduled run skipped on a busy node is tried again.",
    )
