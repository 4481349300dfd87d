"""Error rates from counters: PCIe replays and NVLink errors per hour, from two readings of the same GPU.

The agent reports counters since the driver loaded; a GPU up for months has more than one up for a day,
so the comparison also looks at how fast they grow. ``CounterRates`` remembers each GPU's last counters and
the time of that reading, and gives the rate once a later reading is at least ``min_interval_s`` after it
(``peers.rate_window_s``, 15 minutes: over a shorter time one replay would read as a storm).
A counter that went down (the driver reloaded, the GPU was reset) starts over without a rate.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from aggregator.peers.compare import PeerGpu


class CounterRates:
    """The last (time, PCIe replays, NVLink errors) of each GPU, and the rates since."""

    def __init__(self, min_interval_s: float = 900.0) -> None:
        self._min_interval_s = min_interval_s
        self._last: dict[str, tuple[datetime, int | None, int | None]] = {}

    def with_rates(self, gpus: list[PeerGpu]) -> list[PeerGpu]:
        """``gpus`` with their rates filled where an earlier reading allows; remembers these readings."""
        seen: dict[str, tuple[datetime, int | None, int | None]] = {}
        found = []
        for gpu in gpus:
            now = (gpu.at, gpu.readings.pcie_replays, gpu.readings.nvlink_errors) if gpu.at else None
            before = self._last.get(gpu.uuid)
            if now is None:
                found.append(gpu)
                continue
            if before is None or (now[0] - before[0]).total_seconds() < self._min_interval_s:
                seen[gpu.uuid] = before or now  # keep the older reading until a rate can be taken
                found.append(gpu)
                continue
            hours = (now[0] - before[0]).total_seconds() / 3600
            found.append(
                replace(
                    gpu,
                    replay_rate_per_h=_rate(before[1], now[1], hours),
                    nvlink_rate_per_h=_rate(before[2], now[2], hours),
                )
            )
            seen[gpu.uuid] = now
        self._last = seen
        return found


def _rate(before: int | None, now: int | None, hours: float) -> float | None:
    if before is None or now is None or now < before:
        return None
    return (now - before) / hours
