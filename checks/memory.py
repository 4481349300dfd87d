"""GPU memory health: ECC counters and mode, row remapping (Ampere+), page retirement (before Ampere).

Sources: NVIDIA "GPU Memory Error Management" (row remapping; RMA policy: the failure flag is set once a
bank's 8 uncorrectable remaps are used up, a remapped row fails again, or 512 rows were remapped),
"Dynamic Page Retirement", and DCGM's memory health watch (60 retired pages in total, later 63 to match the
field diagnostic; 15 double-bit retirements as its soft limit).
"""

from __future__ import annotations

import re

from checks.base import gpu_finding
from checks.config import ChecksConfig, EccConfig, RetiredPagesConfig, RowRemapConfig
from core.findings import Action, Finding, Status
from core.snapshot import GpuSnapshot, NodeSnapshot


def check_ecc(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``ECC_DBE_VOLATILE`` (fail, reset_gpu), ``ECC_DBE_AGGREGATE`` (warn), ``ECC_DISABLED`` (warn)."""
    if not config.ecc.enabled:
        return []
    return [finding for gpu in snapshot.gpus for finding in _ecc(gpu, config.ecc)]


def check_row_remap(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``ROW_REMAP_FAILURE`` (replace), ``ROW_REMAP_PENDING`` (reset_gpu), ``ROW_REMAP_UNCORRECTABLE``."""
    if not config.row_remap.enabled:
        return []
    return [finding for gpu in snapshot.gpus for finding in _row_remap(gpu, config.row_remap)]


def check_retired_pages(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``RETIRED_PAGES_PENDING`` (reset_gpu), ``RETIRED_PAGES_LIMIT`` (replace), ``RETIRED_PAGES_DBE``."""
    if not config.retired_pages.enabled:
        return []
    return [finding for gpu in snapshot.gpus for finding in _retired_pages(gpu, config.retired_pages)]


def _ecc(gpu: GpuSnapshot, settings: EccConfig) -> list[Finding]:
    ecc = gpu.ecc
    if ecc is None:
        return []
    found: list[Finding] = []
    volatile, aggregate = ecc.volatile_uncorrected, ecc.aggregate_uncorrected
    if volatile is not None and volatile > 0:
        detail = f"{volatile} uncorrectable ECC error(s) since the last reset: reset the GPU to clear them"
        found.append(_memory("ecc", gpu, Status.FAIL, "ECC_DBE_VOLATILE", detail, Action.RESET_GPU))
    elif aggregate is not None and aggregate >= settings.aggregate_dbe_warn_threshold:
        detail = f"{aggregate} uncorrectable ECC error(s) in the GPU's lifetime, none since the last reset"
        found.append(_memory("ecc", gpu, Status.WARN, "ECC_DBE_AGGREGATE", detail, Action.NONE))
    if ecc.enabled is False and settings.warn_when_disabled and _is_datacenter(gpu.name, settings):
        detail = "ECC is disabled on a data-centre GPU: memory errors go undetected and rows are not remapped"
        found.append(_memory("ecc", gpu, Status.WARN, "ECC_DISABLED", detail, Action.NONE))
    return found


def _is_datacenter(name: str | None, settings: EccConfig) -> bool:
    """Whether the GPU name contains one of the data-centre model names as a whole word."""
    if not name:
        return False
    return any(
        re.search(rf"(?<![A-Za-z0-9]){re.escape(pattern)}(?![A-Za-z0-9])", name, re.IGNORECASE)
        for pattern in settings.datacenter_gpu_patterns
    )


def _row_remap(gpu: GpuSnapshot, settings: RowRemapConfig) -> list[Finding]:
    rows = gpu.remapped_rows
    if rows is None:
        return []
    found: list[Finding] = []
    if rows.failure is True:
        detail = "row remapping failed (spare rows used up): the GPU meets NVIDIA's RMA criterion"
        found.append(_memory("row_remap", gpu, Status.FAIL, "ROW_REMAP_FAILURE", detail, Action.REPLACE))
    if rows.pending is True:
        detail = "row remapping pending: reset the GPU to apply it"
        found.append(_memory("row_remap", gpu, Status.FAIL, "ROW_REMAP_PENDING", detail, Action.RESET_GPU))
    count = rows.uncorrectable
    if count is not None and count >= settings.uncorrectable_replace_threshold:
        detail = (
            f"{count} rows remapped for uncorrectable errors (>= {settings.uncorrectable_replace_threshold})"
        )
        found.append(
            _memory("row_remap", gpu, Status.FAIL, "ROW_REMAP_UNCORRECTABLE", detail, Action.REPLACE)
        )
    elif count is not None and count >= settings.uncorrectable_warn_threshold:
        detail = (
            f"{count} rows remapped for uncorrectable errors (>= {settings.uncorrectable_warn_threshold}): "
            "a bank may be close to its spare rows, run the field diagnostic"
        )
        found.append(_memory("row_remap", gpu, Status.WARN, "ROW_REMAP_UNCORRECTABLE", detail, Action.NONE))
    return found


def _retired_pages(gpu: GpuSnapshot, settings: RetiredPagesConfig) -> list[Finding]:
    pages = gpu.retired_pages
    if pages is None:
        return []
    found: list[Finding] = []
    if pages.pending is True:
        detail = "page retirement pending: reset the GPU (or reload the driver) to apply it"
        found.append(
            _memory("retired_pages", gpu, Status.FAIL, "RETIRED_PAGES_PENDING", detail, Action.RESET_GPU)
        )
    known = [count for count in (pages.single_bit, pages.double_bit) if count is not None]
    total = sum(known)
    double_bit = pages.double_bit
    if known and total >= settings.total_replace_threshold:
        detail = f"{total} retired pages (>= {settings.total_replace_threshold}): replace the GPU"
        found.append(
            _memory("retired_pages", gpu, Status.FAIL, "RETIRED_PAGES_LIMIT", detail, Action.REPLACE)
        )
    elif double_bit is not None and double_bit >= settings.double_bit_warn_threshold:
        detail = f"{double_bit} pages retired for double-bit errors (>= {settings.double_bit_warn_threshold})"
        found.append(_memory("retired_pages", gpu, Status.WARN, "RETIRED_PAGES_DBE", detail, Action.NONE))
    return found


def _memory(check: str, gpu: GpuSnapshot, status: Status, code: str, detail: str, action: Action) -> Finding:  # noqa: PLR0917 -- a local shorthand; keywords would double every call's length
    return gpu_finding(check, gpu, status=status, code=code, detail=detail, action=action)
