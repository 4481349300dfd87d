"""Run every check on a snapshot and fold the findings into the node verdict.

Most checks add their findings; a check of another source's readings (DCGM's, which often repeat what NVML
saw) is ``merged``: its findings are folded into the others one per (GPU, code) by :func:`merge_findings`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import structlog

from checks.base import CheckFunction
from checks.config import ChecksConfig
from checks.dcgm_readings import check_dcgm
from checks.fabric import check_fabric
from checks.memory import check_ecc, check_retired_pages, check_row_remap
from checks.nvlink import check_nvlink
from checks.pcie import check_pcie
from checks.persistence import check_persistence
from checks.presence import check_presence
from checks.recovery_action import check_recovery_action
from checks.thermal import check_thermal
from checks.xid import check_xid
from core.findings import Action, Finding, Status, Verdict
from core.snapshot import NodeSnapshot

log = structlog.get_logger(__name__)

_MAX_ERROR_TEXT = 200


@dataclass(frozen=True, slots=True)
class RegisteredCheck:
    """A check and the family name its ``CHECK_ERROR`` finding carries if it fails."""

    name: str
    function: CheckFunction
    merged: bool = False  # another source's readings: folded into the others one per (GPU, code)


CHECKS: tuple[RegisteredCheck, ...] = (
    RegisteredCheck("presence", check_presence),
    RegisteredCheck("xid", check_xid),
    RegisteredCheck("ecc", check_ecc),
    RegisteredCheck("row_remap", check_row_remap),
    RegisteredCheck("retired_pages", check_retired_pages),
    RegisteredCheck("pcie", check_pcie),
    RegisteredCheck("nvlink", check_nvlink),
    RegisteredCheck("thermal", check_thermal),
    RegisteredCheck("recovery_action", check_recovery_action),
    RegisteredCheck("persistence", check_persistence),
    RegisteredCheck("fabric", check_fabric),
    RegisteredCheck("dcgm", check_dcgm, merged=True),
)
"""Every check, in the fixed order they run."""

PAGE_SNAPSHOT_CHECKS: tuple[RegisteredCheck, ...] = tuple(c for c in CHECKS if c.name != "presence")
"""The checks that judge a snapshot made from an exporter page alone (``exporter_snapshot``): NVML never
read those GPUs, so NVML's presence judgement does not apply to what a page leaves out."""


def run_checks(
    snapshot: NodeSnapshot,
    config: ChecksConfig | None = None,
    *,
    checks: Sequence[RegisteredCheck] = CHECKS,
) -> Verdict:
    """The node verdict: every check's findings, worst first (``Verdict.from_findings``).

    A check that raises is reported as an ``unknown`` ``CHECK_ERROR`` finding and the others still run: one
    bug must not hide a real fault, nor turn into one.
    """
    settings = config if config is not None else ChecksConfig()
    findings: list[Finding] = []
    merged: list[Finding] = []
    for check in checks:
        (merged if check.merged else findings).extend(_run_one(check, snapshot, settings))
    if merged or snapshot.dcgm is not None:
        findings = merge_findings(findings, merged)
    return Verdict.from_findings(snapshot.node, findings)


def merge_findings(primary: Sequence[Finding], extra: Iterable[Finding]) -> list[Finding]:
    """NVML's findings plus another source's, one per (GPU, code): the worse of two reports of one fault.

    dcgm-exporter often repeats what NVML saw (the same ECC counter read twice); keeping both would list
    one fault twice. The primary's finding is kept when the two are equally bad.
    """
    kept: dict[tuple[str | None, str], Finding] = {}
    for finding in (*primary, *extra):
        key = (finding.gpu, finding.code)
        held = kept.get(key)
        if held is None or _severity(finding) > _severity(held):
            kept[key] = finding
    return list(kept.values())


def _severity(finding: Finding) -> tuple[int, int]:
    return finding.status.rank, finding.action.rank


def _run_one(check: RegisteredCheck, snapshot: NodeSnapshot, settings: ChecksConfig) -> list[Finding]:
    try:
        return check.function(snapshot, settings)
    except Exception as exc:  # any bug in one check becomes a finding, by design
        log.error(
            "check_failed", check=check.name, node=snapshot.node, error=type(exc).__name__, exc_info=True
        )
        text = " ".join(str(exc).split())[:_MAX_ERROR_TEXT]
        return [
            Finding(
                check=check.name,
                gpu=None,
                status=Status.UNKNOWN,
                code="CHECK_ERROR",
                message=f"check {check.name} failed: {type(exc).__name__}: {text}",
                action=Action.NONE,
            )
        ]
