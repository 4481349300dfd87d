"""Clock slowdown reasons: thermal and power-brake bits warn, benign bits do not; temperatures over limits warn."""

from __future__ import annotations

import pytest
from checks_builders import gpu, node

from checks.config import ChecksConfig
from checks.thermal import check_thermal
from core.findings import Action, Status

DEFAULTS = ChecksConfig()


def _codes(reasons: int | None, config: ChecksConfig = DEFAULTS) -> list[str]:
    return [f.code for f in check_thermal(node(gpu(clocks_event_reasons=reasons)), config)]


@pytest.mark.parametrize("benign", [0x0, 0x1, 0x2, 0x4, 0x10, 0x100, 0x1 | 0x2 | 0x4 | 0x10 | 0x100])
def test_idle_app_clocks_power_cap_and_other_benign_bits_raise_nothing(benign: int) -> None:
    assert _codes(benign) == []


@pytest.mark.parametrize("bit", [0x8, 0x20, 0x40, 0x8 | 0x40])
def test_thermal_slowdown_bits_warn(bit: int) -> None:
    (finding,) = check_thermal(node(gpu(clocks_event_reasons=bit)), DEFAULTS)
    assert (finding.code, finding.status, finding.action) == ("THERMAL_SLOWDOWN", Status.WARN, Action.NONE)


def test_power_brake_warns_and_explains_the_hw_slowdown_bit() -> None:
    assert _codes(0x80) == ["POWER_BRAKE"]
    assert _codes(0x88) == ["POWER_BRAKE"]


def test_power_brake_and_thermal_slowdown_together_raise_both() -> None:
    assert _codes(0x80 | 0x8 | 0x40) == ["THERMAL_SLOWDOWN", "POWER_BRAKE"]


def test_slowdown_warnings_can_be_turned_off() -> None:
    config = ChecksConfig.from_mapping(
        {"thermal": {"warn_on_thermal_slowdown": False, "warn_on_power_brake": False}}
    )
    assert _codes(0xE8, config) == []


def test_null_reasons_raise_nothing() -> None:
    assert _codes(None) == []


@pytest.mark.parametrize(
    ("temperature", "memory", "warns"), [(85, 95, False), (86, 40, True), (40, 96, True), (None, None, False)]
)
def test_temperatures_over_their_limits_warn(
    temperature: int | None, memory: int | None, warns: bool
) -> None:
    findings = check_thermal(node(gpu(temperature_c=temperature, memory_temperature_c=memory)), DEFAULTS)
    assert [(f.code, f.status, f.action) for f in findings] == (
        [("TEMPERATURE_HIGH", Status.WARN, Action.NONE)] if warns else []
    )


def test_temperature_limits_are_configurable() -> None:
    config = ChecksConfig.from_mapping({"thermal": {"temperature_limit_c": 70}})
    assert [f.code for f in check_thermal(node(gpu(temperature_c=71)), config)] == ["TEMPERATURE_HIGH"]


def test_thermal_family_can_be_disabled() -> None:
    config = ChecksConfig.from_mapping({"thermal": {"enabled": False}})
    assert check_thermal(node(gpu(clocks_event_reasons=0xFF, temperature_c=120)), config) == []
