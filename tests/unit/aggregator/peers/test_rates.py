"""Error rates from two readings of the same GPU, and the comparison of those rates with the peers'."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from aggregator.peer_settings import PeerSettings
from aggregator.peers.compare import NVLINK_ERROR_RATE, PCIE_REPLAY_RATE, PeerGpu, compare
from aggregator.peers.rates import CounterRates
from core.aggregator_api import GpuReadings

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _fleet(at: datetime, replays: dict[int, int], nvlink: int = 0) -> list[PeerGpu]:
    """64 GPUs with a long uptime each (thousands of replays since the driver loaded: not a fault in itself)."""
    return [
        PeerGpu(
            node=f"node-{number // 8}",
            index=number % 8,
            uuid=f"GPU-{number}",
            model="NVIDIA H100 80GB HBM3",
            readings=GpuReadings(
                driver_version="580.95.05",
                pcie_replays=replays.get(number, 3000 + number),
                nvlink_errors=nvlink + (500 if number == 9 else 0),
            ),
            at=at,
        )
        for number in range(64)
    ]


def test_no_rate_from_a_single_reading_or_one_too_soon() -> None:
    rates = CounterRates(min_interval_s=60)
    first = rates.with_rates(_fleet(T0, {}))
    assert all(gpu.replay_rate_per_h is None for gpu in first)
    soon = rates.with_rates(_fleet(T0 + timedelta(seconds=30), {}))
    assert all(gpu.replay_rate_per_h is None for gpu in soon)
    later = rates.with_rates(_fleet(T0 + timedelta(hours=1), {5: 3005 + 120}))
    assert later[5].replay_rate_per_h == 120.0
    assert later[6].replay_rate_per_h == 0.0


def test_a_counter_that_went_down_starts_over_without_a_rate() -> None:
    rates = CounterRates(min_interval_s=60)
    rates.with_rates(_fleet(T0, {}))
    after_reset = rates.with_rates(_fleet(T0 + timedelta(hours=1), {5: 2}))
    assert after_reset[5].replay_rate_per_h is None


def test_a_fast_rising_counter_is_flagged_a_high_total_alone_is_not() -> None:
    settings = PeerSettings(error_floor=10**9)  # totals out of the way: rates only
    rates = CounterRates(settings.rate_window_s)
    assert compare(rates.with_rates(_fleet(T0, {})), settings).outliers == []
    later = rates.with_rates(_fleet(T0 + timedelta(hours=2), {5: 3005 + 400}, nvlink=10))
    outliers = compare(later, settings).outliers
    assert [(o.uuid, o.code) for o in outliers] == [("GPU-5", PCIE_REPLAY_RATE)]
    assert (
        outliers[0].evidence == "GPU 5: 200 PCIe replays an hour while the median of 63 peers is 0.0 an hour"
    )
    # GPU 9's 500 NVLink errors were there from the start: its rate is its peers' (5 an hour), no outlier.
    assert all(o.code != NVLINK_ERROR_RATE for o in outliers)
    assert replace(later[9]).nvlink_rate_per_h == 5.0


def test_one_replay_within_the_rate_window_is_no_rate_at_all() -> None:
    """Agents report every few seconds: one replay a minute apart must not read as 60 an hour."""
    rates = CounterRates(PeerSettings().rate_window_s)
    rates.with_rates(_fleet(T0, {}))
    minute_later = rates.with_rates(_fleet(T0 + timedelta(minutes=1), {5: 3006}))
    assert minute_later[5].replay_rate_per_h is None
    quarter_later = rates.with_rates(_fleet(T0 + timedelta(minutes=15), {5: 3006}))
    assert quarter_later[5].replay_rate_per_h == 4.0  # 1 replay in a quarter of an hour
