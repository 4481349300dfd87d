"""Judge the DCGM readings a snapshot carries (``snapshot.dcgm``): dcgm-exporter's GPUs and ``dcgmi health``.

The backends only read (agent/backends/dcgm/); this check turns their readings into findings, so the agent's
pass and ``gpuhealth check --snapshot`` of a saved snapshot judge them alike. A source that should have
answered and could not (``exporter_error``, ``health_error``) is one ``unknown`` finding, never a fault.
The runner folds these findings into the NVML checks' one per (GPU, code)
(:func:`checks.runner.merge_findings`).
"""

from __future__ import annotations

from checks.config import ChecksConfig
from checks.dcgm import unavailable_finding
from checks.dcgm_exporter import CHECK as EXPORTER_CHECK
from checks.dcgm_exporter import UNAVAILABLE_CODE as EXPORTER_UNAVAILABLE
from checks.dcgm_exporter import exporter_findings
from checks.dcgmi import CHECK_HEALTH, health_findings
from core.dcgm import DcgmReadings
from core.findings import Finding
from core.snapshot import NodeSnapshot

DCGMI_UNAVAILABLE = "DCGMI_UNAVAILABLE"


def check_dcgm(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """The findings of the snapshot's DCGM readings; none when it carries none."""
    if snapshot.dcgm is None:
        return []
    return dcgm_findings(snapshot.dcgm, snapshot, config)


def dcgm_findings(readings: DcgmReadings, snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """The findings of DCGM readings, GPUs named by ``snapshot``'s UUIDs where DCGM gives only an index."""
    found: list[Finding] = []
    if readings.exporter_error is not None:
        message = f"dcgm-exporter unavailable: {readings.exporter_error}"
        found.append(unavailable_finding(EXPORTER_CHECK, EXPORTER_UNAVAILABLE, message))
    elif readings.exporter is not None:
        found.extend(exporter_findings(readings.exporter, config, node=snapshot.node))
    if readings.health_error is not None:
        message = f"dcgmi unavailable: {readings.health_error}"
        found.append(unavailable_finding(CHECK_HEALTH, DCGMI_UNAVAILABLE, message))
    elif readings.health is not None:
        found.extend(health_findings(readings.health, {gpu.index: gpu.uuid for gpu in snapshot.gpus}))
    return found
