"""Judge DCGM readings the way the agent's pass does: the backends read, ``checks.dcgm_readings`` judges."""

from __future__ import annotations

from agent.backends.dcgm.exporter import readings_for_page
from checks.config import ChecksConfig
from checks.dcgm_readings import dcgm_findings
from core.dcgm import DcgmReadings
from core.findings import Finding
from core.snapshot import NodeSnapshot


def judge(
    readings: DcgmReadings, snapshot: NodeSnapshot | None = None, config: ChecksConfig | None = None
) -> list[Finding]:
    """The findings of ``readings`` against ``snapshot`` (an empty node when not given)."""
    held = snapshot if snapshot is not None else NodeSnapshot(node="", gpus=[])
    return dcgm_findings(readings, held, config if config is not None else ChecksConfig())


def findings_for_page(text: str, snapshot: NodeSnapshot | None, config: ChecksConfig) -> list[Finding]:
    """A dcgm-exporter page already in hand, read and judged (``gpuhealth check --dcgm-metrics FILE``)."""
    return judge(readings_for_page(text, snapshot), snapshot, config)
