"""Findings from one dcgm-exporter page, judged by the same checks as NVML's readings.

The exporter reads the same counters NVML does (through DCGM), so its readings are turned into a
:class:`GpuSnapshot` and judged by the existing ECC, row-remap, PCIe and XID checks: one set of thresholds,
one XID catalogue. Only the health-watch metric (``DCGM_EXP_GPU_HEALTH_STATUS``) is DCGM's own and maps
to ``DCGM_HEALTH_<SYSTEM>`` (checks/dcgm.py). Every finding is re-labelled ``check: dcgm_exporter`` so a
reader can tell where it came from; :func:`checks.runner.merge_findings` folds duplicates of NVML's.
"""

from __future__ import annotations

from collections.abc import Sequence

from checks.config import ChecksConfig
from checks.dcgm import grade_from_value, health_finding, unavailable_finding
from checks.memory import check_ecc, check_row_remap
from checks.pcie import check_pcie
from checks.xid import check_xid
from core.dcgm import ExporterGpu, Grade
from core.findings import Finding
from core.snapshot import EccCounters, GpuSnapshot, NodeSnapshot, PcieLink, RemappedRows, XidEvent

CHECK = "dcgm_exporter"
UNAVAILABLE_CODE = "DCGM_EXPORTER_UNAVAILABLE"
NO_HEALTH_SERIES_CODE = "DCGM_EXPORTER_NO_HEALTH_SERIES"
NO_HEALTH_SERIES_MESSAGE = (
    "the dcgm-exporter page has none of the GPU health series (ECC DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, row remap "
    "DCGM_FI_DEV_ROW_REMAP_PENDING / _FAILURE, XID DCGM_FI_DEV_XID_ERRORS): add them to its counters file "
    "(default-counters.csv, set by -f or DCGM_EXPORTER_COLLECTORS)"
)


def as_snapshot_gpu(gpu: ExporterGpu) -> GpuSnapshot:
    """The page's readings of one GPU in snapshot form, so the NVML checks judge them with the same
    thresholds."""
    ecc = None
    if gpu.dbe_volatile is not None or gpu.dbe_aggregate is not None:
        ecc = EccCounters(volatile_uncorrected=gpu.dbe_volatile, aggregate_uncorrected=gpu.dbe_aggregate)
    rows = None
    if any(
        value is not None
        for value in (
            gpu.remapped_correctable,
            gpu.remapped_uncorrectable,
            gpu.remap_pending,
            gpu.remap_failure,
        )
    ):
        rows = RemappedRows(
            correctable=gpu.remapped_correctable,
            uncorrectable=gpu.remapped_uncorrectable,
            pending=gpu.remap_pending,
            failure=gpu.remap_failure,
        )
    pcie = PcieLink(replay_counter=gpu.pcie_replays) if gpu.pcie_replays is not None else None
    return GpuSnapshot(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        pci_bus_id=gpu.pci_bus_id,
        ecc=ecc,
        remapped_rows=rows,
        pcie=pcie,
        xid_events=_xid_events(gpu),
    )


def _xid_events(gpu: ExporterGpu) -> list[XidEvent]:
    """The window count series when exported (one event per record), else the last-XID gauge.

    ``DCGM_EXP_XID_ERRORS_COUNT`` counts the XIDs of the exporter's sliding window, so a fault ages
    out on its own; the ``DCGM_FI_DEV_XID_ERRORS`` gauge only holds the last XID seen and stays set
    until DCGM restarts, hence the count series wins when both are there.
    """
    if gpu.xid_counts is not None:
        return [
            XidEvent(xid=xid, source="dcgm", gpu_uuid=gpu.uuid)
            for xid, count in sorted(gpu.xid_counts.items())
            if xid > 0
            for _ in range(max(0, count))
        ]
    if gpu.last_xid is not None and gpu.last_xid > 0:
        return [XidEvent(xid=gpu.last_xid, source="dcgm", gpu_uuid=gpu.uuid, message=gpu.last_xid_message)]
    return []


def exporter_snapshot(node: str, gpus: Sequence[ExporterGpu]) -> NodeSnapshot:
    """A snapshot of the GPUs a page names (``gpuhealth check --dcgm-metrics`` with no other snapshot).

    Judge it with :data:`checks.runner.PAGE_SNAPSHOT_CHECKS`: NVML never read these GPUs, so NVML's presence
    judgement (a GPU that answers none of its readings is unreadable) does not apply to what a page leaves
    out.
    """
    return NodeSnapshot(node=node, gpus=[as_snapshot_gpu(gpu) for gpu in gpus])


def exporter_findings(gpus: Sequence[ExporterGpu], config: ChecksConfig, *, node: str = "") -> list[Finding]:
    """Every finding one exporter page supports, each labelled ``check: dcgm_exporter``.

    A page that names GPUs but carries no health series for any of them (a counters file trimmed to
    temperature, power and utilisation) cannot say whether a GPU is healthy: one node-level ``unknown``
    finding says which series are missing and where to enable them, and no GPU is blamed.
    """
    snapshot = exporter_snapshot(node, gpus)
    if gpus and not any(gpu.has_health_readings() for gpu in gpus):
        return [unavailable_finding(CHECK, NO_HEALTH_SERIES_CODE, NO_HEALTH_SERIES_MESSAGE)]
    found: list[Finding] = []
    for check in (check_ecc, check_row_remap, check_pcie, check_xid):
        found.extend(finding.model_copy(update={"check": CHECK}) for finding in check(snapshot, config))
    for gpu, as_gpu in zip(gpus, snapshot.gpus, strict=True):
        found.extend(_health_findings(gpu, as_gpu))
    return found


def _health_findings(gpu: ExporterGpu, as_gpu: GpuSnapshot) -> list[Finding]:
    where = f"GPU {as_gpu.index}" + (f" ({as_gpu.pci_bus_id})" if as_gpu.pci_bus_id else "")
    found: list[Finding] = []
    for watch in gpu.health:
        grade = grade_from_value(watch.value)
        if grade is Grade.PASS:
            continue
        finding = health_finding(
            watch.system, grade, gpu=gpu.uuid, where=where, detail=watch.error_code or "", check=CHECK
        )
        if finding is not None:
            found.append(finding)
    return found
