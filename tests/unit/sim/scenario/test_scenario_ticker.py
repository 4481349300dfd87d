"""The pooled fleet's scheduler: when an agent's next pass comes."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from agent.loop import Agent
from sim.scenario.ticker import AgentTicker


class CountedAgent:
    """What the ticker uses of an agent: its wake event, its pass, its link, and how soon it wants the next
    pass (``Agent.next_wait_s``: the interval, or less while a permit is to be asked again)."""

    def __init__(self, node: str, next_wait_s: float) -> None:
        self.node = node
        self.wake = threading.Event()
        self.parts = SimpleNamespace(link=None)
        self.passes = 0
        self._next_wait_s = next_wait_s

    def tick(self) -> Any:
        self.passes += 1

    def next_wait_s(self) -> float:
        return self._next_wait_s


def test_an_agent_told_to_ask_for_its_permit_again_soon_gets_its_pass_then_not_at_the_interval() -> None:
    """A node's first permit is refused while it settles (15 s), the aggregator saying when to ask again: in
    the pooled fleet, as under ``Agent.run``, the next pass comes then, not a whole interval later (at 60 s
    the XID's incident had ended before the permit was asked again, and the node was never drained)."""
    settling = CountedAgent("gpu-node-0", next_wait_s=0.2)
    polling = CountedAgent("gpu-node-1", next_wait_s=60.0)
    ticker = AgentTicker(cast(list[Agent], [settling, polling]), interval_s=60.0).start()
    try:
        deadline = time.monotonic() + 30.0  # a guard against a hang, not a measured time
        while settling.passes < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        ticker.stop()
    assert settling.passes >= 4
    assert polling.passes <= 1  # its first pass only: the interval is 60 s
