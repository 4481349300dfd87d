"""Realistic fixture snapshots judged end to end: each one's expected status, action and finding codes."""

from __future__ import annotations

import pytest
from repo_paths import FIXTURES as TEST_FIXTURES

from checks.runner import run_checks
from core.findings import Action, Status
from core.snapshot import NodeSnapshot

FIXTURES = TEST_FIXTURES / "snapshots"

EXPECTED: dict[str, tuple[Status, Action, set[str]]] = {
    "h100-sxm-healthy.json": (Status.OK, Action.NONE, set()),
    "h100-sxm-xid79-lost.json": (Status.FAIL, Action.REBOOT, {"GPU_LOST", "XID_79", "XID_154"}),
    "h100-sxm-row-remap-pending.json": (
        Status.FAIL,
        Action.RESET_GPU,
        {"ROW_REMAP_PENDING", "ECC_DBE_VOLATILE", "XID_94", "XID_63", "XID_45"},
    ),
    "h100-sxm-xid48-63.json": (
        Status.FAIL,
        Action.DRAIN_AND_RESET,
        {"XID_48", "XID_63", "XID_45", "ECC_DBE_VOLATILE", "ROW_REMAP_PENDING"},
    ),
    "h200-sxm-healthy.json": (Status.OK, Action.NONE, set()),
    "h200-sxm-xid154-reboot.json": (Status.FAIL, Action.REBOOT, {"XID_119", "XID_154", "RECOVERY_ACTION"}),
    "a100-pcie-healthy.json": (Status.OK, Action.NONE, set()),
    "a100-pcie-pcie-degraded.json": (Status.WARN, Action.NONE, {"PCIE_LINK_DEGRADED", "PCIE_REPLAYS"}),
    "v100-sxm2-healthy.json": (Status.OK, Action.NONE, set()),
    "v100-sxm2-retired-pages-pending.json": (
        Status.FAIL,
        Action.RESET_GPU,
        {"RETIRED_PAGES_PENDING", "XID_63"},
    ),
    "no-driver.json": (Status.UNKNOWN, Action.NONE, {"NVML_UNAVAILABLE"}),
    "gpu-missing.json": (Status.FAIL, Action.REBOOT, {"GPU_MISSING", "XID_79"}),
}


def _load(name: str) -> NodeSnapshot:
    return NodeSnapshot.model_validate_json((FIXTURES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_snapshot_gets_its_expected_verdict(name: str) -> None:
    status, action, codes = EXPECTED[name]
    verdict = run_checks(_load(name))
    assert (verdict.status, verdict.action, {f.code for f in verdict.findings}) == (status, action, codes)


def test_every_brief_fixture_exists_and_is_valid_v1() -> None:
    for name in EXPECTED:
        assert _load(name).schema_ == "gpuhealth.snapshot/v1"


@pytest.mark.parametrize(
    ("name", "gpu_name", "count"),
    [
        ("h100-sxm-healthy.json", "NVIDIA H100 80GB HBM3", 8),
        ("h200-sxm-healthy.json", "NVIDIA H200", 8),
        ("a100-pcie-healthy.json", "NVIDIA A100-PCIE-40GB", 4),
        ("v100-sxm2-healthy.json", "Tesla V100-SXM2-32GB", 8),
        ("gpu-missing.json", "NVIDIA H100 80GB HBM3", 7),
    ],
)
def test_fixtures_model_their_platform(name: str, gpu_name: str, count: int) -> None:
    snapshot = _load(name)
    assert [gpu.name for gpu in snapshot.gpus] == [gpu_name] * count
    assert len({gpu.uuid for gpu in snapshot.gpus}) == count


def test_pcie_boards_have_no_nvlink_and_v100_has_retired_pages_but_no_row_remapping() -> None:
    assert all(gpu.nvlink is None for gpu in _load("a100-pcie-healthy.json").gpus)
    v100 = _load("v100-sxm2-healthy.json").gpus
    assert all(gpu.remapped_rows is None and gpu.retired_pages is not None for gpu in v100)


def test_the_xid79_fixture_counts_one_fall_reported_by_two_sources_once() -> None:
    verdict = run_checks(_load("h100-sxm-xid79-lost.json"))
    (xid79,) = [f for f in verdict.findings if f.code == "XID_79"]
    assert " 1x " in xid79.message


def test_the_missing_gpu_is_named_by_its_pci_address_at_node_level() -> None:
    verdict = run_checks(_load("gpu-missing.json"))
    (xid79,) = [f for f in verdict.findings if f.code == "XID_79"]
    assert xid79.gpu is None
    assert "0000:db:00" in xid79.message
