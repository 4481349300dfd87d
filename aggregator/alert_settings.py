"""Alert settings: the sinks (where alerts go) and the routes (which alerts go where).

Secrets (sink URLs, HMAC keys, routing keys) are ``SecretStr`` so that no repr, log line or error message
ever shows them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

SinkType = Literal["webhook", "slack", "pagerduty", "alertmanager"]
Severity = Literal["info", "warning", "critical"]
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


class SinkSettings(BaseModel):
    """One receiver of alerts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Stable name; deliveries refer to it.")
    type: SinkType = Field(description="webhook, slack, pagerduty or alertmanager.")
    url: SecretStr = Field(
        description="Where to POST (Alertmanager: its base URL; /api/v2/alerts is appended). Never logged."
    )
    secret: SecretStr | None = Field(
        default=None, description="webhook: HMAC-SHA256 key for the X-Gpuhealth-Signature header."
    )
    routing_key: SecretStr | None = Field(default=None, description="pagerduty: the integration key.")
    cloudevents: bool = Field(
        default=False, description="webhook: send a CloudEvents 1.0 structured-mode JSON envelope."
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Seconds to wait for the receiver.")
    max_attempts: int = Field(
        default=8, ge=1, description="Failed attempts before an alert is dead-lettered."
    )
    backoff_initial_s: float = Field(default=2.0, gt=0, description="Wait after the first failed attempt.")
    backoff_max_s: float = Field(default=300.0, gt=0, description="Longest wait between attempts.")
    rate_per_minute: float = Field(default=60.0, gt=0, description="Most deliveries per minute to this sink.")
    burst: int = Field(
        default=10, ge=1, description="Deliveries that may go at once before the rate applies."
    )


class RouteSettings(BaseModel):
    """Alerts matching every condition here go to ``sinks``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sinks: list[str] = Field(min_length=1, description="Names of the sinks to deliver to.")
    min_severity: Severity = Field(default="info", description="Only alerts at least this severe.")
    kinds: list[str] = Field(default_factory=list, description="Only these alert kinds (empty: all).")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Only nodes carrying all these labels (fleet alerts never match)."
    )
