"""Persistence mode. Off by default: a fleet that runs without it on purpose would otherwise be "degraded"
on every node, hiding real warnings; it is a provisioning setting better checked once, at image build.
"""

from __future__ import annotations

from checks.base import gpu_finding
from checks.config import ChecksConfig
from core.findings import Action, Finding, Status
from core.snapshot import NodeSnapshot

CHECK = "persistence"


def check_persistence(snapshot: NodeSnapshot, config: ChecksConfig) -> list[Finding]:
    """``PERSISTENCE_MODE_OFF`` (warn, none) for each GPU that reports persistence mode off."""
    if not config.persistence.enabled:
        return []
    return [
        gpu_finding(
            CHECK,
            gpu,
            status=Status.WARN,
            code="PERSISTENCE_MODE_OFF",
            detail="persistence mode is off: driver state is torn down between jobs (slow starts)",
            action=Action.NONE,
        )
        for gpu in snapshot.gpus
        if gpu.persistence_mode is False
    ]
