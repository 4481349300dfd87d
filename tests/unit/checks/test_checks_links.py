"""PCIe and NVLink: width is the signal, idle generation drops are not; PCIe boards never have links down."""

from __future__ import annotations

from typing import Any

import pytest
from checks_builders import gpu, node

from checks.config import ChecksConfig
from checks.nvlink import check_nvlink
from checks.pcie import check_pcie
from core.findings import Action, Status

DEFAULTS = ChecksConfig()


def _pcie(**fields: Any) -> dict[str, Any]:
    return {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "replay_counter": 0, **fields}


def _links(count: int, **fields: Any) -> list[dict[str, Any]]:
    base = {"active": True, "replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    return [{"link": n, **base, **fields} for n in range(count)]


# --- PCIe ---


def test_narrower_link_warns_with_no_action_by_default() -> None:
    (finding,) = check_pcie(node(gpu(pcie=_pcie(width=8))), DEFAULTS)
    assert (finding.code, finding.status, finding.action) == ("PCIE_LINK_DEGRADED", Status.WARN, Action.NONE)
    assert "x8 of x16" in finding.message


def test_narrower_link_action_is_configurable_and_then_fails() -> None:
    config = ChecksConfig.from_mapping({"pcie": {"width_degraded_action": "reset_gpu"}})
    (finding,) = check_pcie(node(gpu(pcie=_pcie(width=4, gen=3))), config)
    assert (finding.status, finding.action) == (Status.FAIL, Action.RESET_GPU)
    assert "gen 3 of 5" in finding.message


def test_lower_generation_alone_is_idle_power_saving_and_raises_nothing() -> None:
    assert check_pcie(node(gpu(pcie=_pcie(gen=1))), DEFAULTS) == []


def test_lower_generation_can_be_made_to_warn() -> None:
    config = ChecksConfig.from_mapping({"pcie": {"warn_on_gen_below_max": True}})
    (finding,) = check_pcie(node(gpu(pcie=_pcie(gen=1))), config)
    assert (finding.code, finding.status, finding.action) == ("PCIE_LINK_DEGRADED", Status.WARN, Action.NONE)


@pytest.mark.parametrize(("replays", "warns"), [(999, False), (1000, True)])
def test_replay_counter_threshold(replays: int, warns: bool) -> None:
    findings = check_pcie(node(gpu(pcie=_pcie(replay_counter=replays))), DEFAULTS)
    assert [(f.code, f.status) for f in findings] == ([("PCIE_REPLAYS", Status.WARN)] if warns else [])


def test_null_pcie_fields_raise_nothing() -> None:
    nulls = {"gen": None, "width": None, "max_gen": None, "max_width": None, "replay_counter": None}
    assert (
        check_pcie(
            node(gpu(pcie=None), gpu(1, pcie=nulls), gpu(2, pcie=_pcie(max_width=None, width=1))), DEFAULTS
        )
        == []
    )


# --- NVLink ---


def test_inactive_link_fails_with_gpu_reset_and_lists_the_links() -> None:
    links = _links(18)
    links[3]["active"] = False
    links[11]["active"] = False
    (finding,) = check_nvlink(node(gpu(nvlink=links)), DEFAULTS)
    assert (finding.code, finding.status, finding.action) == ("NVLINK_DOWN", Status.FAIL, Action.RESET_GPU)
    assert "3, 11" in finding.message
    assert "2 of 18" in finding.message


def test_pcie_board_with_null_nvlink_never_reports_links_down() -> None:
    assert check_nvlink(node(gpu(name="NVIDIA A100-PCIE-40GB", nvlink=None)), DEFAULTS) == []


@pytest.mark.parametrize(
    "name",
    ["NVIDIA A100-PCIE-40GB", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA L4", "NVIDIA L40S", "Tesla T4"],
)
def test_pcie_style_boards_reporting_unbridged_links_inactive_are_not_down(name: str) -> None:
    """nvidia-smi shows every link of an unbridged PCIe board as <inactive>: its normal state."""
    assert check_nvlink(node(gpu(name=name, nvlink=_links(12, active=False))), DEFAULTS) == []


@pytest.mark.parametrize(
    "name", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA B200", None]
)
def test_sxm_boards_and_unnamed_gpus_with_all_links_inactive_are_down(name: str | None) -> None:
    (finding,) = check_nvlink(node(gpu(name=name, nvlink=_links(18, active=False))), DEFAULTS)
    assert (finding.code, finding.status) == ("NVLINK_DOWN", Status.FAIL)


def test_bridge_optional_patterns_are_configurable() -> None:
    config = ChecksConfig.from_mapping({"nvlink": {"bridge_optional_patterns": []}})
    (finding,) = check_nvlink(node(gpu(name="NVIDIA H100 PCIe", nvlink=_links(2, active=False))), config)
    assert finding.code == "NVLINK_DOWN"


def test_unknown_link_state_or_no_links_raise_nothing() -> None:
    assert check_nvlink(node(gpu(nvlink=_links(4, active=None)), gpu(1, nvlink=[])), DEFAULTS) == []


def test_nvlink_down_action_is_configurable() -> None:
    config = ChecksConfig.from_mapping({"nvlink": {"down_action": "none"}})
    (finding,) = check_nvlink(node(gpu(nvlink=_links(2, active=False))), config)
    assert (finding.status, finding.action) == (Status.WARN, Action.NONE)


@pytest.mark.parametrize(
    ("counter", "below", "at"),
    [("replay_errors", 99, 100), ("recovery_errors", 0, 1), ("crc_errors", 99, 100)],
)
def test_nvlink_error_counter_thresholds(counter: str, below: int, at: int) -> None:
    assert check_nvlink(node(gpu(nvlink=_links(2, **{counter: below}))), DEFAULTS) == []
    (finding,) = check_nvlink(node(gpu(nvlink=_links(2, **{counter: at}))), DEFAULTS)
    assert (finding.code, finding.status, finding.action) == ("NVLINK_ERRORS", Status.WARN, Action.NONE)
    assert "link 0" in finding.message and "link 1" in finding.message


def test_null_nvlink_counters_raise_nothing() -> None:
    nulls = {"replay_errors": None, "recovery_errors": None, "crc_errors": None}
    assert check_nvlink(node(gpu(nvlink=_links(18, **nulls))), DEFAULTS) == []


def test_link_checks_can_be_disabled() -> None:
    config = ChecksConfig.from_mapping({"pcie": {"enabled": False}, "nvlink": {"enabled": False}})
    snapshot = node(gpu(pcie=_pcie(width=1, replay_counter=10**6), nvlink=_links(2, active=False)))
    assert check_pcie(snapshot, config) == []
    assert check_nvlink(snapshot, config) == []
