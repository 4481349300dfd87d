"""ECC, row remapping and page retirement: thresholds at their edges, and null fields that stay silent."""

from __future__ import annotations

from typing import Any

import pytest
from checks_builders import gpu, node

from checks.config import ChecksConfig
from checks.memory import check_ecc, check_retired_pages, check_row_remap
from core.findings import Action, Finding, Status

DEFAULTS = ChecksConfig()


def _ecc(**counters: Any) -> dict[str, Any]:
    base = {"enabled": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0}
    return {**base, **counters}


def _codes(findings: list[Finding]) -> list[tuple[str, Status, Action]]:
    return [(f.code, f.status, f.action) for f in findings]


# --- ECC ---


def test_volatile_uncorrectable_errors_fail_and_ask_for_a_gpu_reset() -> None:
    findings = check_ecc(node(gpu(ecc=_ecc(volatile_uncorrected=1, aggregate_uncorrected=1))), DEFAULTS)
    assert _codes(findings) == [("ECC_DBE_VOLATILE", Status.FAIL, Action.RESET_GPU)]


def test_zero_uncorrectable_errors_raise_nothing() -> None:
    assert check_ecc(node(gpu(ecc=_ecc(volatile_corrected=40, aggregate_corrected=900))), DEFAULTS) == []


@pytest.mark.parametrize("volatile", [0, None])
def test_lifetime_only_uncorrectable_errors_warn(volatile: int | None) -> None:
    findings = check_ecc(
        node(gpu(ecc=_ecc(volatile_uncorrected=volatile, aggregate_uncorrected=3))), DEFAULTS
    )
    assert _codes(findings) == [("ECC_DBE_AGGREGATE", Status.WARN, Action.NONE)]


def test_aggregate_threshold_edge() -> None:
    config = ChecksConfig.from_mapping({"ecc": {"aggregate_dbe_warn_threshold": 5}})
    assert check_ecc(node(gpu(ecc=_ecc(aggregate_uncorrected=4))), config) == []
    assert len(check_ecc(node(gpu(ecc=_ecc(aggregate_uncorrected=5))), config)) == 1


@pytest.mark.parametrize(
    "name", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-PCIE-40GB", "Tesla V100-SXM2-32GB", "NVIDIA H200"]
)
def test_ecc_disabled_on_a_datacentre_gpu_warns(name: str) -> None:
    findings = check_ecc(node(gpu(name=name, ecc=_ecc(enabled=False))), DEFAULTS)
    assert _codes(findings) == [("ECC_DISABLED", Status.WARN, Action.NONE)]


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A3000 Laptop GPU", None])
def test_ecc_disabled_on_other_gpus_or_an_unnamed_gpu_is_not_flagged(name: str | None) -> None:
    assert check_ecc(node(gpu(name=name, ecc=_ecc(enabled=False))), DEFAULTS) == []


def test_ecc_disabled_warning_can_be_turned_off() -> None:
    config = ChecksConfig.from_mapping({"ecc": {"warn_when_disabled": False}})
    assert check_ecc(node(gpu(ecc=_ecc(enabled=False))), config) == []


def test_null_ecc_fields_raise_nothing() -> None:
    assert check_ecc(node(gpu(ecc=None)), DEFAULTS) == []
    assert check_ecc(node(gpu(ecc={"enabled": None})), DEFAULTS) == []


# --- row remapping ---


def _rows(**fields: Any) -> dict[str, Any]:
    return {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False, **fields}


def test_pending_row_remap_fails_with_gpu_reset() -> None:
    findings = check_row_remap(node(gpu(remapped_rows=_rows(pending=True, uncorrectable=1))), DEFAULTS)
    assert _codes(findings) == [("ROW_REMAP_PENDING", Status.FAIL, Action.RESET_GPU)]


def test_row_remap_failure_means_replace() -> None:
    findings = check_row_remap(node(gpu(remapped_rows=_rows(failure=True))), DEFAULTS)
    assert _codes(findings) == [("ROW_REMAP_FAILURE", Status.FAIL, Action.REPLACE)]


def test_failure_and_pending_are_both_reported() -> None:
    findings = check_row_remap(node(gpu(remapped_rows=_rows(failure=True, pending=True))), DEFAULTS)
    assert [f.code for f in findings] == ["ROW_REMAP_FAILURE", "ROW_REMAP_PENDING"]


@pytest.mark.parametrize(
    ("uncorrectable", "expected"),
    [
        (7, []),
        (8, [("ROW_REMAP_UNCORRECTABLE", Status.WARN, Action.NONE)]),
        (511, [("ROW_REMAP_UNCORRECTABLE", Status.WARN, Action.NONE)]),
        (512, [("ROW_REMAP_UNCORRECTABLE", Status.FAIL, Action.REPLACE)]),
    ],
)
def test_uncorrectable_remapped_rows_thresholds(
    uncorrectable: int, expected: list[tuple[str, Status, Action]]
) -> None:
    findings = check_row_remap(node(gpu(remapped_rows=_rows(uncorrectable=uncorrectable))), DEFAULTS)
    assert _codes(findings) == expected


def test_remapped_rows_thresholds_are_configurable() -> None:
    config = ChecksConfig.from_mapping(
        {"row_remap": {"uncorrectable_warn_threshold": 2, "uncorrectable_replace_threshold": 4}}
    )
    assert check_row_remap(node(gpu(remapped_rows=_rows(uncorrectable=1))), config) == []
    assert check_row_remap(node(gpu(remapped_rows=_rows(uncorrectable=2))), config)[0].status is Status.WARN
    assert (
        check_row_remap(node(gpu(remapped_rows=_rows(uncorrectable=4))), config)[0].action is Action.REPLACE
    )


def test_null_row_remap_fields_raise_nothing() -> None:
    assert check_row_remap(node(gpu(remapped_rows=None)), DEFAULTS) == []
    assert check_row_remap(node(gpu(remapped_rows={"pending": None, "failure": None})), DEFAULTS) == []


# --- page retirement ---


def _pages(
    single_bit: int | None = 0, double_bit: int | None = 0, pending: bool | None = False
) -> dict[str, Any]:
    return {"single_bit": single_bit, "double_bit": double_bit, "pending": pending}


def test_pending_page_retirement_fails_with_gpu_reset() -> None:
    findings = check_retired_pages(node(gpu(retired_pages=_pages(single_bit=1, pending=True))), DEFAULTS)
    assert _codes(findings) == [("RETIRED_PAGES_PENDING", Status.FAIL, Action.RESET_GPU)]


@pytest.mark.parametrize(
    ("single_bit", "double_bit", "expected"),
    [
        (50, 9, []),
        (50, 10, [("RETIRED_PAGES_LIMIT", Status.FAIL, Action.REPLACE)]),
        (None, 60, [("RETIRED_PAGES_LIMIT", Status.FAIL, Action.REPLACE)]),
        (0, 14, []),
        (0, 15, [("RETIRED_PAGES_DBE", Status.WARN, Action.NONE)]),
        (None, None, []),
    ],
)
def test_retired_page_thresholds(
    single_bit: int | None, double_bit: int | None, expected: list[tuple[str, Status, Action]]
) -> None:
    findings = check_retired_pages(node(gpu(retired_pages=_pages(single_bit, double_bit))), DEFAULTS)
    assert _codes(findings) == expected


def test_retired_page_limit_is_configurable_to_dcgms_63() -> None:
    config = ChecksConfig.from_mapping({"retired_pages": {"total_replace_threshold": 63}})
    assert check_retired_pages(node(gpu(retired_pages=_pages(60, 0))), config) == []
    assert (
        check_retired_pages(node(gpu(retired_pages=_pages(63, 0))), config)[0].code == "RETIRED_PAGES_LIMIT"
    )


@pytest.mark.parametrize("family", ["ecc", "row_remap", "retired_pages"])
def test_memory_families_can_be_disabled(family: str) -> None:
    broken = gpu(
        ecc=_ecc(volatile_uncorrected=5),
        remapped_rows=_rows(pending=True, failure=True),
        retired_pages=_pages(pending=True),
    )
    config = ChecksConfig.from_mapping({family: {"enabled": False}})
    check = {"ecc": check_ecc, "row_remap": check_row_remap, "retired_pages": check_retired_pages}[family]
    assert check(node(broken), config) == []
    assert check(node(broken), ChecksConfig()) != []


def test_memory_findings_name_the_gpu() -> None:
    snapshot = node(gpu(3, remapped_rows=_rows(pending=True)))
    (finding,) = check_row_remap(snapshot, DEFAULTS)
    assert finding.gpu == snapshot.gpus[0].uuid
    assert finding.message.startswith("GPU 3 (")
