"""One deep-diagnostic run to do: the schedule's, or a human's ``gpuhealth diag`` request.

Its own small module so the aggregator link can turn a request into an order without loading the runner.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULE = "schedule"
"""``requested_by`` of a scheduled run."""


@dataclass(frozen=True)
class DiagOrder:
    """One run to do: the schedule's, or a human's request (``request_id`` from the aggregator)."""

    level: int
    requested_by: str = SCHEDULE
    reason: str = ""
    force: bool = False
    request_id: int | None = None

    @property
    def scheduled(self) -> bool:
        return self.request_id is None and self.requested_by == SCHEDULE

    def describe(self) -> str:
        who = "scheduled" if self.scheduled else f"requested by {self.requested_by}"
        return f"dcgmi diag level {self.level} ({who}{', forced' if self.force else ''})"
