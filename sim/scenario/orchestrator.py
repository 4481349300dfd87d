"""The seam between the scenario engine and an emulated orchestrator (Kubernetes or Nomad).

The engine never names an orchestrator's objects: it asks this protocol to build the fleet, start the
workloads, wire an agent to a node, and read back what the agents did (state, taint, cordon, pods, job
restarts), and to take the orchestrator's API away for an outage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent.backends.nvml.seam import NvmlLibrary
from agent.loop import Agent
from agent.settings import AgentSettings
from sim.scenario.model import Role, Workloads

if TYPE_CHECKING:
    from sim.scenario.hosts import AgentConnector


@dataclass(frozen=True)
class NodeView:
    """What the orchestrator shows of one node right now."""

    name: str
    state: str | None  # our state label, None when never set
    taint: str | None  # our taint's value, None when absent
    cordoned: bool  # unschedulable because of us
    workload_pods: int  # pods of workloads (not DaemonSets) bound to it and not terminating


@dataclass(frozen=True)
class JobView:
    """The training job: how often it restarted and where its running pods are."""

    restarts: int
    running_nodes: tuple[str, ...]
    expected_pods: int


class Orchestrator(Protocol):
    """One emulated orchestrator, started and stopped by the engine."""

    kind: str

    def start(self, nodes: int, gpus_per_node: int) -> list[str]:
        """Serve the API and create the fleet; returns the node names."""
        ...

    def stop(self) -> None: ...

    def build_agent(self, settings: AgentSettings, library: NvmlLibrary) -> Agent:
        """The node's real agent (``agent.wiring.build_agent``), wired to this orchestrator's API."""
        ...

    def connector(self) -> AgentConnector | None:
        """How agents in another process reach this orchestrator (``sim/scenario/hosts.py``), or None
        when they must run in this one."""
        ...

    def central_remediator(self, workdir: Path) -> dict[str, Any] | None:
        """The aggregator's ``remediator:`` section for central drains on this orchestrator (its own
        credentials, written under ``workdir``), or None where the agents drain themselves."""
        ...

    def start_workloads(self, workloads: Workloads, timeout_s: float) -> None:
        """Create the workloads and wait until every pod runs; raises TimeoutError otherwise."""
        ...

    def role_nodes(self, role: Role) -> list[str]:
        """Nodes running the role's workload now (``idle``: neither), sorted by name."""
        ...

    def node(self, name: str) -> NodeView: ...

    def nodes(self) -> list[NodeView]: ...

    def tainted(self, names: Iterable[str]) -> set[str]:
        """Which of ``names`` carry our taint (our quarantine on Nomad) now: the fault-to-taint probe's one
        question, answered from the named nodes alone (no workload counts, no read of the whole fleet)."""
        ...

    def job(self) -> JobView | None:
        """The training job, or None when the scenario has none."""
        ...

    def api_outage(self, seconds: float) -> None:
        """The API answers nothing (connections refused) for ``seconds``, then comes back."""
        ...
