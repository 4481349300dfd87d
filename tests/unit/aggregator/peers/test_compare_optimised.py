"""The comparison takes each population's statistics once (not once per GPU): it must find exactly what the
per-GPU comparison it replaced finds (``reference_compare.py``), on healthy noise, slow-GPU faults and
random readings."""

from __future__ import annotations

import importlib.util
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

from aggregator.peer_settings import PeerSettings
from aggregator.peers.compare import PeerGpu, compare
from aggregator.peers.fleet import peer_gpus
from aggregator.peers.rates import CounterRates
from aggregator.peers.stats import RobustScale, robust_z
from core.aggregator_api import GpuReadings
from sim.fakes.fleet import LoadedFleet


def _reference() -> ModuleType:
    path = Path(__file__).with_name("reference_compare.py")
    spec = importlib.util.spec_from_file_location("reference_compare", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _reference()
START = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_simulated_day_with_faults_gives_the_same_comparison() -> None:
    """40 loaded nodes (some idle, at their own intensity) with the three slow-GPU faults and a replay
    storm, 8 steps with rates: every step's outliers and groups are the reference's."""
    fleet = LoadedFleet(40, seed="optimised")
    fleet.nvml[fleet.names[1]].train_down_link(2, gen=3)
    fleet.nvml[fleet.names[2]].throttle_silently(4, factor=0.6)
    fleet.nvml[fleet.names[3]].slow_at_full_power(6, factor=0.62)
    settings = PeerSettings(rate_window_s=600)
    rates = CounterRates(settings.rate_window_s)
    found = 0
    try:
        for step in range(8):
            fleet.step(step)
            fleet.nvml[fleet.names[4]].add_pcie_replays(1, 50)
            at = START + step * timedelta(minutes=15)
            gpus = rates.with_rates(
                [g for name, stored in fleet.stored() for g in peer_gpus(name, stored, at=at)]
            )
            mine = compare(gpus, settings)
            assert mine == REFERENCE.compare(gpus, settings)
            found += len(mine.outliers)
    finally:
        fleet.close()
    assert found > 0  # the faults were seen: the equality is not that of two empty results


def _random_gpu(rng: random.Random, number: int) -> PeerGpu:
    def maybe(value: object) -> object:
        return None if rng.random() < 0.05 else value

    limit = rng.choice([700.0, 700.0, 700.0, 700.0, 450.0])
    values = {
        "driver_version": rng.choice(["580.95.05", "580.95.05", "570.1"]),
        "utilization_pct": maybe(rng.choice([0, 40, 85, 95, 100])),
        "sm_clock_mhz": maybe(rng.choice([1980, 1900, 1800, 1200, 600, rng.randint(300, 2000)])),
        "power_w": maybe(round(rng.uniform(0.1, 1.0) * limit, 1)),
        "power_limit_w": maybe(limit),
        "temperature_c": maybe(rng.choice([40, 60, 65, 70, 95, rng.randint(30, 100)])),
        "pcie_gen": maybe(rng.choice([5, 5, 5, 4, 3, 1])),
        "pcie_width": maybe(rng.choice([16, 16, 16, 16, 8])),
        "pcie_replays": maybe(rng.choice([0, 0, 1, 5000])),
        "nvlink_errors": maybe(rng.choice([0, 0, 2, 900])),
        "clocks_event_reasons": maybe(rng.choice([0, 4, 0x40])),
    }
    return PeerGpu(
        node=f"n{number // 8}",
        index=number % 8,
        uuid=f"GPU-{number}",
        model=rng.choice(["H100", "H100", "H100", "A100"]),
        readings=GpuReadings.model_validate(values),
        replay_rate_per_h=rng.choice([None, 0.0, 1.0, 400.0]),
        nvlink_rate_per_h=rng.choice([None, 0.0, 90.0]),
    )


@pytest.mark.parametrize("seed", range(12))
def test_random_readings_give_the_same_comparison(seed: int) -> None:
    """Mixed models and drivers, missing readings, idle and busy GPUs, ties and clusters of odd values."""
    rng = random.Random(seed)
    gpus = [_random_gpu(rng, number) for number in range(rng.choice([5, 30, 120, 400]))]
    settings = PeerSettings(min_peers=rng.choice([2, 8]), link_majority=rng.choice([0.51, 0.9]))
    assert compare(gpus, settings) == REFERENCE.compare(gpus, settings)


def test_robust_scale_is_robust_z() -> None:
    rng = random.Random(7)
    values = [rng.gauss(60.0, 3.0) for _ in range(101)] + [60.0] * 20
    scale = RobustScale.of(values)
    for value in [*values[:10], 0.0, 95.0]:
        assert scale.z(value) == robust_z(value, values)
