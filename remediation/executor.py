"""What the agent loop needs from an orchestrator executor (Kubernetes now, Nomad later)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuhealth.core.steps import ApplyReport, NodeFacts, Step


class NodeExecutor(Protocol):
    """Applies plan steps to one node and reports what it observes there.

    ``facts()`` is served from the executor's watch of its own node (no API call); ``wait_for_change``
    lets the loop wake when someone else changed the node (a human uncordon, our taint removed: drift).
    """

    def facts(self) -> NodeFacts: ...

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport: ...

    def wait_for_change(self, timeout_s: float) -> bool: ...

    def close(self) -> None: ...
