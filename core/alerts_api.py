"""API models of alerts, their deliveries and silences."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from core.aggregator_api import NODE_NAME_PATTERN, reject_unstorable_text

MAX_SILENCE_S = 90 * 86400.0


class Alert(BaseModel):
    """One alert: something on-call must hear about, once."""

    id: int
    key: str = Field(description="Idempotency key: the same cause never raises a second alert.")
    kind: str
    status: Literal["firing", "resolved"]
    severity: Literal["info", "warning", "critical"]
    group_key: str = Field(description="Alerts of one group (an incident, a node, the breaker) go in order.")
    node: str | None
    incident_id: str | None
    summary: str
    details: dict[str, Any]
    labels: dict[str, str]
    created_at: datetime
    silence_id: int | None = Field(description="The silence that muted it (then it is not delivered).")


class Delivery(BaseModel):
    """One alert to one sink."""

    id: int
    alert_id: int
    sink: str
    status: Literal["pending", "delivered", "dead"]
    attempts: int
    next_attempt_at: datetime
    last_error: str | None = Field(description="Why the last attempt failed (never the sink's URL or key).")
    delivered_at: datetime | None


class AlertView(Alert):
    """An alert with its deliveries (none when silenced or when no route matched)."""

    deliveries: list[Delivery]


class SilenceCreate(BaseModel):
    """``gpuhealth silence NODE|--selector k=v --for 2h --reason TEXT``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    node: str | None = Field(default=None, pattern=NODE_NAME_PATTERN, max_length=253)
    selector: dict[
        Annotated[str, StringConstraints(min_length=1, max_length=317)],
        Annotated[str, StringConstraints(max_length=253)],
    ] = Field(default_factory=dict, max_length=32, description="Labels (Kubernetes-sized keys and values).")
    duration_s: float = Field(gt=0, le=MAX_SILENCE_S, description="How long, from now.")
    reason: str = Field(min_length=1, max_length=1000)
    created_by: str | None = Field(
        default=None,
        max_length=128,
        description="Ignored (kept for older clients): the aggregator records the authenticated caller.",
    )

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        # A lone surrogate or a NUL would be stored, then break every read of the silences (and the status).
        reject_unstorable_text(data)
        return data

    @model_validator(mode="after")
    def _node_or_selector(self) -> SilenceCreate:
        if (self.node is None) == (not self.selector):
            raise ValueError("give either a node or a non-empty selector, not both")
        return self

    def ends_at(self, now: datetime) -> datetime:
        """When the silence ends."""
        return now + timedelta(seconds=self.duration_s)


class Silence(BaseModel):
    """A stored silence."""

    id: int
    node: str | None
    selector: dict[str, str]
    reason: str
    created_by: str
    starts_at: datetime
    ends_at: datetime
    removed_at: datetime | None
    active: bool
