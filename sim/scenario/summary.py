"""What a scenario run reports: each expectation (expected, observed, passed), latencies and durations.

``gpuhealth demo --json`` prints :class:`RunSummary` as one JSON object.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Where a scenario plays: the emulated orchestrator, or a real Kubernetes stack (``sim.realkube``).
Cluster = Literal["emulated", "real"]

FLEET_PAGE_PREFIX = "fleet page: "
"""How a run announces its fleet page's address (the live view keeps it on screen for the whole run)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExpectationResult(_Frozen):
    name: str
    expected: str
    observed: str
    passed: bool
    at_s: float | None = Field(default=None, description="When it was decided, from the timeline's start.")


class FaultLatency(_Frozen):
    """From an injected fault to our taint on the node (None: never tainted, e.g. an application fault)."""

    injection: str
    node: str
    seconds: float | None


class LatencySummary(_Frozen):
    samples: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None


class Durations(_Frozen):
    startup_s: float = Field(description="Orchestrator, aggregator, agents and workloads up.")
    timeline_s: float = Field(description="From the first injection's clock start to the last decision.")
    total_s: float


class RunSummary(_Frozen):
    scenario: str
    orchestrator: str
    cluster: Cluster = Field(
        default="emulated",
        description="emulated: the orchestrator emulated in process; real: a real Kubernetes stack.",
    )
    nodes: int
    time_scale: float = Field(
        default=1.0,
        description="Every time of the scenario was multiplied by this (a large fleet polls slower).",
    )
    passed: bool
    expectations: list[ExpectationResult]
    fault_to_taint: list[FaultLatency]
    fault_to_taint_summary: LatencySummary
    alerts_received: dict[str, int]
    durations: Durations


def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank quantile (p99 of 200 samples is the 198th)."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]


def summarise_latencies(latencies: list[FaultLatency]) -> LatencySummary:
    seconds = [item.seconds for item in latencies if item.seconds is not None]
    if not seconds:
        return LatencySummary(samples=0, p50_s=None, p99_s=None, max_s=None)
    return LatencySummary(
        samples=len(seconds),
        p50_s=round(percentile(seconds, 0.5), 3),
        p99_s=round(percentile(seconds, 0.99), 3),
        max_s=round(max(seconds), 3),
    )
