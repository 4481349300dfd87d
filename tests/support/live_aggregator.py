"""The real aggregator on a thread, sharing a test's clock: a thin layer over ``sim.aggregator_process``
(the demo serves it the same way). ``stop()`` / ``start()`` keep the port and the database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.clock import ManualClock
from sim.aggregator_process import AggregatorServer, free_port

__all__ = ["LiveAggregator", "free_port"]


class LiveAggregator(AggregatorServer):
    """An :class:`AggregatorServer` whose clock is the test's :class:`ManualClock`."""

    def __init__(self, database: Path, clock: ManualClock, token: str | None, **settings: Any) -> None:
        """``settings``: the aggregator's, and ``drain_for`` (a central remediator on these drains).

        No settle wait before a first permit unless asked (``permit_settle_s``): tests here drive the agent's
        passes by hand on a manual clock; the wait itself is proven in test_agg_permits and test_link."""
        settings.setdefault("permit_settle_s", 0.0)
        super().__init__(database, token, now=clock.now, **settings)

    def start(self) -> LiveAggregator:
        super().start()
        return self
