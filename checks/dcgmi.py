"""Judge ``dcgmi health -c -j`` and ``dcgmi diag -r N -j`` results (parsed in agent/backends/dcgm/).

Pure functions over the readings of core/dcgm.py, shared by the checks (a snapshot's ``dcgm.health``), the
agent's deep diagnostics and ``gpuhealth check --dcgmi-diag FILE``.
"""

from __future__ import annotations

from collections.abc import Mapping

from checks.dcgm import diag_finding, health_finding
from core.dcgm import DiagResult, Grade, HealthReport
from core.findings import Finding

CHECK_HEALTH = "dcgm_health"


def gpu_where(index: int | None) -> str:
    return f"GPU {index}" if index is not None else "all GPUs"


def health_findings(report: HealthReport, uuids: Mapping[int, str]) -> list[Finding]:
    """``DCGM_HEALTH_<SYSTEM>`` per GPU incident (by UUID when the GPU index is known), node-level else."""
    found: list[Finding] = []
    for incident in report.incidents:
        is_gpu = incident.entity_group.upper() == "GPU"
        gpu = uuids.get(incident.entity_id) if is_gpu and incident.entity_id is not None else None
        entity = "" if incident.entity_id is None else str(incident.entity_id)
        where = gpu_where(incident.entity_id) if is_gpu else f"{incident.entity_group} {entity}".strip()
        finding = health_finding(
            incident.system, incident.grade, gpu=gpu, where=where, detail=incident.message, check=CHECK_HEALTH
        )
        if finding is not None:
            found.append(finding)
    if not found and report.overall in {Grade.WARN, Grade.FAIL}:  # graded overall, but no incident listed
        finding = health_finding(
            "OVERALL", report.overall, gpu=None, where="node", detail="no incident listed", check=CHECK_HEALTH
        )
        if finding is not None:
            found.append(finding)
    return found


def diag_findings(result: DiagResult, uuids: Mapping[int, str]) -> list[Finding]:
    """``DCGM_DIAG_<TEST>`` per (test, GPU) that warned or failed, by UUID when the index is known."""
    found: list[Finding] = []
    for test in result.tests:
        for entity in test.results:
            if entity.grade is None:
                continue
            gpu = uuids.get(entity.gpu) if entity.gpu is not None else None
            finding = diag_finding(
                test.name,
                entity.grade,
                gpu=gpu,
                where=gpu_where(entity.gpu),
                detail="; ".join(entity.warnings),
            )
            if finding is not None:
                found.append(finding)
    return found
