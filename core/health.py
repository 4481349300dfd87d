"""The debounced health of one node: its state, and the incident that is open on it (docs/agent.md).

Produced by the state machine (``agent/state/machine.py``) from successive verdicts; consumed by the
remediation plan (``remediation/plan/planner.py``), the aggregator reports and the metrics.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from core.findings import Action, Finding


class NodeState(StrEnum):
    """The value of the node label ``gpuhealth.io/state``; on Nomad, of the node metadata ``gpuhealth.state``.

    See docs/agent.md, "What the agent writes on its Node", and docs/nomad.md.
    """

    HEALTHY = "healthy"
    DEGRADED = "degraded"  # warn-level findings held for N readings; node stays in service
    UNHEALTHY = "unhealthy"  # an incident whose action takes the node out of service
    UNKNOWN = "unknown"  # a source that should answer cannot; never treated as a fault
    QUARANTINED = "quarantined"  # held out of service by a human or the aggregator (or action replace)
    TESTING = "testing"  # diagnostics running


class Incident(BaseModel):
    """One fault episode on a node: opened on the first actionable finding, closed on recovery.

    The id and start time survive reason changes (a new XID on the same node joins the open incident) and
    agent restarts (the state file keeps them).
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Stable id, e.g. inc-gpu-node-07-20261202T074000Z-3f2a.")
    started_at: datetime
    reasons: list[str] = Field(
        description="Finding codes that made or joined the incident, first seen first."
    )
    gpus: list[str] = Field(default_factory=list, description="UUIDs of the GPUs involved.")
    action: Action = Field(description="The most severe action any reason called for (never decreases).")
    findings: list[Finding] = Field(default_factory=list, description="The latest actionable findings.")


class NodeHealth(BaseModel):
    """What the agent believes about its node after debouncing."""

    model_config = ConfigDict(frozen=True)

    node: str
    state: NodeState
    since: datetime = Field(description="When the node entered this state.")
    incident: Incident | None = None
    reason: str = Field(description="Leading finding code (the condition's reason), or 'AllChecksPassed'.")
    message: str = Field(description="Short human text for the condition message.")
    manual_quarantine: bool = Field(
        default=False, description="Held by a human/aggregator quarantine request."
    )
