"""NVML reachable, GPUs present and readable: unknown is never a fault, lost and missing GPUs are."""

from __future__ import annotations

from checks_builders import bare_gpu, gpu, node

from checks.config import ChecksConfig
from checks.presence import TELEMETRY_FIELDS, answered_nothing, check_presence
from core.findings import Action, Status

DEFAULTS = ChecksConfig()


def test_nvml_error_is_unknown_and_node_level_and_hides_gpu_missing() -> None:
    snapshot = node(nvml_error="NVMLError_DriverNotLoaded: Driver Not Loaded", expected_gpu_count=8)
    (finding,) = check_presence(snapshot, DEFAULTS)
    assert (finding.code, finding.status, finding.action, finding.gpu) == (
        "NVML_UNAVAILABLE",
        Status.UNKNOWN,
        Action.NONE,
        None,
    )
    assert "Driver Not Loaded" in finding.message


def test_nvml_error_text_is_kept_to_one_short_line() -> None:
    (finding,) = check_presence(node(nvml_error="first line\nsecond line " + "x" * 500), DEFAULTS)
    assert "\n" not in finding.message
    assert len(finding.message) < 300


def test_fewer_gpus_than_expected_fails_with_reboot_at_node_level() -> None:
    (finding,) = check_presence(node(*(gpu(i) for i in range(7)), expected_gpu_count=8), DEFAULTS)
    assert (finding.code, finding.status, finding.action, finding.gpu) == (
        "GPU_MISSING",
        Status.FAIL,
        Action.REBOOT,
        None,
    )
    assert "7 of 8" in finding.message


def test_as_many_or_more_gpus_than_expected_is_fine() -> None:
    assert check_presence(node(gpu(0), gpu(1), expected_gpu_count=2), DEFAULTS) == []
    assert check_presence(node(gpu(0), gpu(1), expected_gpu_count=1), DEFAULTS) == []


def test_unknown_expected_count_raises_no_missing_finding() -> None:
    assert check_presence(node(expected_gpu_count=None), DEFAULTS) == []


def test_lost_gpu_fails_with_reboot_and_is_not_called_unreadable() -> None:
    (finding,) = check_presence(node(bare_gpu(0, lost=True)), DEFAULTS)
    assert (finding.code, finding.status, finding.action) == ("GPU_LOST", Status.FAIL, Action.REBOOT)


def test_a_gpu_that_answered_nothing_is_unknown() -> None:
    (finding,) = check_presence(
        node(bare_gpu(0, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:18:00.0")), DEFAULTS
    )
    assert (finding.code, finding.status, finding.action) == ("GPU_UNREADABLE", Status.UNKNOWN, Action.NONE)


def test_empty_groups_count_as_no_answer() -> None:
    assert answered_nothing(bare_gpu(0, ecc={}, pcie={"gen": None}, nvlink=[], lost=False))


def test_any_single_reading_means_the_gpu_answered() -> None:
    for field, value in [("temperature_c", 40), ("ecc", {"enabled": True}), ("recovery_action", 0)]:
        assert not answered_nothing(bare_gpu(0, **{field: value})), field
    assert "nvlink" in TELEMETRY_FIELDS


def test_presence_actions_are_configurable_and_status_follows_them() -> None:
    config = ChecksConfig.from_mapping({"presence": {"missing_action": "none", "lost_action": "replace"}})
    findings = check_presence(node(bare_gpu(0, lost=True), expected_gpu_count=2), config)
    by_code = {f.code: f for f in findings}
    assert (by_code["GPU_MISSING"].status, by_code["GPU_MISSING"].action) == (Status.WARN, Action.NONE)
    assert (by_code["GPU_LOST"].status, by_code["GPU_LOST"].action) == (Status.FAIL, Action.REPLACE)


def test_presence_can_be_disabled() -> None:
    config = ChecksConfig.from_mapping({"presence": {"enabled": False}})
    assert check_presence(node(nvml_error="boom"), config) == []


def test_healthy_gpus_raise_nothing() -> None:
    assert check_presence(node(gpu(0), gpu(1), expected_gpu_count=2), DEFAULTS) == []
