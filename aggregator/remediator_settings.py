"""Settings of the central remediator: the ``remediator:`` section of the aggregator's configuration.

The remediator drains and requeues on the permits the aggregator granted, with the aggregator's own
orchestrator credentials (docs/architecture.md, "The central remediator"). Off by default: an aggregator
without it grants permits exactly as before, and agents configured to drain centrally then wait.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.requeue.decisions import RequeuePolicy
from remediation.nomad.settings import NomadSettings


class RemediatorSettings(BaseModel):
    """Where the central remediator acts and how it shares its work with other aggregators."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    orchestrator: Literal["off", "kubernetes", "nomad"] = Field(
        default="off", description="Drain and requeue centrally on this orchestrator; off: no remediator."
    )
    kubeconfig: Path | None = Field(
        default=None, description="Kubeconfig of the remediator's identity; unset: in-cluster ServiceAccount."
    )
    nomad: NomadSettings = Field(
        default_factory=NomadSettings,
        description="Nomad: a server's address and the remediator's own ACL token (token_file).",
    )
    name: str = Field(
        default="",
        max_length=128,
        description="Stable name (the pod's); a restart resumes its drains. Empty: the host name.",
    )
    lease_s: float = Field(
        default=30.0, gt=0, description="A drain's lease: another aggregator takes it over after this long."
    )
    poll_s: float = Field(default=0.5, gt=0, description="How often new drain orders are looked for.")
    max_drains: int = Field(default=256, ge=1, description="Drains run at once (each on its own thread).")
    drain: DrainPolicy = Field(default_factory=DrainPolicy, description="How nodes are drained.")
    requeue: RequeuePolicy = Field(
        default_factory=RequeuePolicy,
        description="Per workload kind, after a drain: auto (restart when it would not), evict-only, off.",
    )

    def owner(self) -> str:
        """The name drains are leased to."""
        return self.name or socket.gethostname()
