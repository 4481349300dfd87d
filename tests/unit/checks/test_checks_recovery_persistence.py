"""NVML recovery action field and persistence mode."""

from __future__ import annotations

import pytest
from checks_builders import gpu, node

from checks.config import ChecksConfig
from checks.persistence import check_persistence
from checks.recovery_action import check_recovery_action
from core.findings import Action, Status

DEFAULTS = ChecksConfig()


@pytest.mark.parametrize(
    ("value", "status", "action"),
    [
        (1, Status.FAIL, Action.RESET_GPU),
        (2, Status.FAIL, Action.REBOOT),
        (3, Status.FAIL, Action.DRAIN_AND_RESET),
        (4, Status.FAIL, Action.DRAIN_AND_RESET),
    ],
)
def test_recovery_action_values_map_to_actions(value: int, status: Status, action: Action) -> None:
    (finding,) = check_recovery_action(node(gpu(recovery_action=value)), DEFAULTS)
    assert (finding.code, finding.status, finding.action) == ("RECOVERY_ACTION", status, action)


def test_recovery_action_none_or_null_raises_nothing() -> None:
    assert check_recovery_action(node(gpu(recovery_action=0), gpu(1, recovery_action=None)), DEFAULTS) == []


@pytest.mark.parametrize(
    ("value", "name"), [(5, "Recover IMEX Domain"), (7, "System Reboot"), (42, "unknown")]
)
def test_unclassified_recovery_action_values_warn_and_name_the_value(value: int, name: str) -> None:
    (finding,) = check_recovery_action(node(gpu(recovery_action=value)), DEFAULTS)
    assert (finding.status, finding.action) == (Status.WARN, Action.NONE)
    assert f"{value} ({name})" in finding.message


def test_newer_recovery_action_values_can_be_classified_in_config() -> None:
    config = ChecksConfig.from_mapping({"recovery_action": {"overrides": {7: "reboot"}}})
    (finding,) = check_recovery_action(node(gpu(recovery_action=7)), config)
    assert (finding.status, finding.action) == (Status.FAIL, Action.REBOOT)


def test_recovery_action_check_can_be_disabled() -> None:
    config = ChecksConfig.from_mapping({"recovery_action": {"enabled": False}})
    assert check_recovery_action(node(gpu(recovery_action=2)), config) == []


def test_persistence_check_is_off_by_default() -> None:
    assert check_persistence(node(gpu(persistence_mode=False)), DEFAULTS) == []


def test_persistence_mode_off_warns_when_enabled() -> None:
    config = ChecksConfig.from_mapping({"persistence": {"enabled": True}})
    snapshot = node(
        gpu(0, persistence_mode=False), gpu(1, persistence_mode=True), gpu(2, persistence_mode=None)
    )
    (finding,) = check_persistence(snapshot, config)
    assert (finding.code, finding.status, finding.action, finding.gpu) == (
        "PERSISTENCE_MODE_OFF",
        Status.WARN,
        Action.NONE,
        snapshot.gpus[0].uuid,
    )
