"""Settings of the peer comparison: the ``peers:`` section of the aggregator's configuration."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PeerSettings(BaseModel):
    """How GPUs are compared with their peers (same model and driver) and when one is an outlier."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=True, description="Compare GPUs with their peers; off: no peer findings.")
    min_peers: int = Field(
        default=8, ge=2, description="Fewest other GPUs of the same model and driver before any comparison."
    )
    interval_s: float = Field(default=60.0, gt=0, description="How often the fleet is compared (alerts).")
    alerts: bool = Field(default=True, description="Raise a warning alert for each new outlier.")
    quarantine: list[str] = Field(
        default_factory=list,
        description="Peer codes (e.g. PEER_PCIE_LINK) whose new outlier quarantines its node until a human "
        "releases it, once per cause (with alerts on); empty (the default): never.",
    )
    busy_utilization_pct: int = Field(
        default=80, ge=1, le=100, description="A GPU at or above this utilisation counts as under load."
    )
    link_majority: float = Field(
        default=0.9, gt=0.5, le=1.0, description="Share of peers that must agree on a PCIe link to judge one."
    )
    clock_deficit_pct: float = Field(
        default=20.0, gt=0, lt=100, description="SM clock this far below the peers' median at load is slow."
    )
    robust_z: float = Field(
        default=6.0, gt=0, description="And this many robust deviations (1.4826 MAD) from the median."
    )
    temperature_excess_c: float = Field(
        default=12.0,
        gt=0,
        description="Degrees hotter than peers at the same power that count as an outlier.",
    )
    error_floor: int = Field(
        default=100, ge=1, description="Fewest PCIe replays or NVLink errors (since driver load) ever judged."
    )
    error_rate_floor_per_h: float = Field(
        default=30.0,
        gt=0,
        description="Fewest PCIe replays or NVLink errors an hour ever judged a high rate.",
    )
    rate_window_s: float = Field(
        default=900.0,
        ge=60,
        description="Error rates are taken over at least this long (one replay in a minute is no storm).",
    )
    error_factor: float = Field(
        default=20.0, gt=1, description="An error count this many times the peers' median (plus one) is high."
    )
    power_limit_share: float = Field(
        default=0.9,
        gt=0,
        le=1.0,
        description="A power limit below this share of the peers' usual one is low.",
    )
