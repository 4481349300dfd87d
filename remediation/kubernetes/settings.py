"""The Kubernetes executor's settings: kept apart from the client code so that reading the agent's settings
(on a Nomad node too) never loads the ``kubernetes`` package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RetrySettings(BaseModel):
    """How the executor retries one step against the API server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempts: int = Field(default=6, ge=1, description="Most attempts per step, the first included.")
    initial_wait_s: float = Field(
        default=0.2, ge=0, description="Wait after the first failure; doubles after each further one."
    )
    max_wait_s: float = Field(default=5.0, ge=0, description="Longest wait between two attempts.")
    deadline_s: float = Field(
        default=10.0,
        gt=0,
        description="Most time one step may take, waits and requests together; then it fails for this tick.",
    )
    request_timeout_s: float = Field(
        default=5.0, gt=0, description="Connect and read timeout of each API request."
    )
