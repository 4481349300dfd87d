"""The peer comparison, pure: healthy noise flags nothing, each slow-GPU reading is named with its evidence."""

from __future__ import annotations

from aggregator.peer_settings import PeerSettings
from aggregator.peers.compare import (
    NVLINK_ERRORS,
    PCIE_LINK,
    PCIE_REPLAYS,
    POWER_LIMIT,
    SM_CLOCK,
    TEMPERATURE,
    PeerGpu,
    compare,
)
from core.aggregator_api import GpuReadings
from core.findings import Action, Status

SETTINGS = PeerSettings()


def _gpu(number: int, **changes: object) -> PeerGpu:
    """A healthy H100 under load, varied a little by ``number``."""
    values: dict[str, object] = {
        "driver_version": "580.95.05",
        "utilization_pct": 95,
        "sm_clock_mhz": 1800 + (number * 37) % 120,
        "max_sm_clock_mhz": 1980,
        "clocks_event_reasons": 4,
        "power_w": 690.0 + number % 10,
        "power_limit_w": 700.0,
        "temperature_c": 64 + number % 7,
        "pcie_gen": 5,
        "pcie_width": 16,
        "pcie_max_gen": 5,
        "pcie_max_width": 16,
        "pcie_replays": number % 3,
        "nvlink_errors": number % 2,
    }
    values.update(changes)
    return PeerGpu(
        node=f"node-{number // 8:03d}",
        index=number % 8,
        uuid=f"GPU-{number}",
        model="NVIDIA H100 80GB HBM3",
        readings=GpuReadings.model_validate(values),
    )


def _fleet(*, count: int = 512, **faulty: object) -> list[PeerGpu]:
    return _fleet_of(faulty, count)


def _fleet_of(faulty: dict[str, object], count: int = 512) -> list[PeerGpu]:
    """``count`` GPUs, the 28th (node-003 GPU 3) with the ``faulty`` readings."""
    return [_gpu(number, **(faulty if number == 27 else {})) for number in range(count)]


def test_a_healthy_varied_fleet_has_no_outlier() -> None:
    assert compare(_fleet(), SETTINGS).outliers == []


def test_a_link_trained_down_is_named_with_its_peers_link() -> None:
    outliers = compare(_fleet(pcie_gen=3), SETTINGS).outliers
    assert [(o.node, o.index, o.code) for o in outliers] == [("node-003", 3, PCIE_LINK)]
    assert outliers[0].evidence == (
        "GPU 3 runs at PCIe Gen3 x16 while 511 of 511 peers run Gen5 x16 (its maximum: Gen5 x16)"
    )
    finding = outliers[0].finding()
    assert (finding.status, finding.action, finding.gpu) == (Status.WARN, Action.NONE, "GPU-27")


def test_an_idle_link_at_gen1_is_not_a_fault_but_a_narrow_one_is() -> None:
    idle: dict[str, object] = {"utilization_pct": 0, "pcie_gen": 1, "sm_clock_mhz": 345, "power_w": 70.0}
    assert compare(_fleet_of(idle), SETTINGS).outliers == []
    narrow = compare(_fleet_of({**idle, "pcie_width": 8}), SETTINGS).outliers
    assert [o.code for o in narrow] == [PCIE_LINK]
    assert "runs at PCIe x8 while 511 of 511 peers run x16" in narrow[0].evidence


def test_a_clock_silently_throttled_is_named_with_no_reason() -> None:
    outliers = compare(_fleet(sm_clock_mhz=1100, clocks_event_reasons=0, power_w=420.0), SETTINGS).outliers
    assert [o.code for o in outliers] == [SM_CLOCK]
    assert "SM clock 41 % below peers at 420 W" in outliers[0].evidence
    assert "no throttle reason reported" in outliers[0].evidence


def test_low_clocks_at_full_power_say_at_the_same_power() -> None:
    outliers = compare(_fleet(sm_clock_mhz=1150), SETTINGS).outliers
    assert [o.code for o in outliers] == [SM_CLOCK]
    assert "below peers at the same power" in outliers[0].evidence


def test_a_clock_within_the_healthy_spread_is_not_flagged() -> None:
    assert compare(_fleet(sm_clock_mhz=1650), SETTINGS).outliers == []


def test_power_limit_temperature_and_counters() -> None:
    assert [o.code for o in compare(_fleet(power_limit_w=450.0), SETTINGS).outliers] == [POWER_LIMIT]
    hot = compare(_fleet(temperature_c=88), SETTINGS).outliers
    assert [o.code for o in hot] == [TEMPERATURE]
    assert "hotter than the median of" in hot[0].evidence
    assert [o.code for o in compare(_fleet(pcie_replays=5000), SETTINGS).outliers] == [PCIE_REPLAYS]
    assert [o.code for o in compare(_fleet(nvlink_errors=900), SETTINGS).outliers] == [NVLINK_ERRORS]
    # Under the floor, a count is no evidence however far above a median of zero.
    assert compare(_fleet(pcie_replays=60), SETTINGS).outliers == []


def test_too_few_peers_judges_nothing() -> None:
    result = compare(_fleet(count=8, pcie_gen=3, pcie_width=4), SETTINGS)
    assert result.outliers == []
    assert [(g.gpus, g.judged) for g in result.groups] == [(8, False)]


def test_models_and_drivers_are_compared_only_among_themselves() -> None:
    fleet = _fleet(count=64)
    others = [
        PeerGpu(
            g.node, g.index, g.uuid + "-b", g.model, g.readings.model_copy(update={"driver_version": "570.1"})
        )
        for g in _fleet(count=64, pcie_gen=4)
    ]
    # The second driver's GPU 27 is Gen4 among Gen5 peers of its own driver: found, and only there.
    outliers = compare(fleet + others, SETTINGS).outliers
    assert [(o.uuid, o.driver) for o in outliers] == [("GPU-27-b", "570.1")]
