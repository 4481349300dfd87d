"""The Nomad side of a scenario: ``sim.nomad`` (HTTP API, scheduler, drainer), batch training, inference.

The emulated Nomad region runs in this process over real HTTP; each agent talks to its node's local client
agent address (``NomadSim.client_address``), as the agent's system job would. What the agents did is read
back from the emulator's state (the same objects the API serves):

* state: dynamic node metadata ``gpuhealth.state``; taint: our quarantine key ``gpuhealth.quarantine``
  (``<action>:<effect>``), whose action is the value a Kubernetes taint would carry;
* cordoned (for a drain): the node ineligible with a drain of ours for the open incident (Nomad has no cordon
  of its own; a quarantine without a drain also makes the node ineligible, and is not counted as one);
* workload pods: live allocations of non-system jobs on the node (the agent's system job stays, as a
  drain with ``IgnoreSystemJobs`` leaves it);
* job restarts: a whole new set of allocations of the training job running, none from the previous set
  (the agent's requeue stops every allocation of the batch job; the scheduler places replacements).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.backends.nvml.seam import NvmlLibrary
from agent.loop import Agent
from agent.settings import AgentSettings
from agent.wiring import build_agent
from core.clock import RealClock
from remediation.nomad.central import NomadCentralDrains
from remediation.nomad.node_view import (
    DRAINED,
    INCIDENT,
    INELIGIBLE,
    INELIGIBLE_BY,
    OWNER,
    QUARANTINE,
    STATE,
)
from remediation.nomad.settings import NomadRetrySettings, NomadSettings
from sim.nomad.errors import NomadApiError
from sim.nomad.harness import NomadSim
from sim.nomad.model import node_names
from sim.nomad.state import is_live
from sim.scenario.model import InferenceService, Role, TrainingJob, Workloads
from sim.scenario.orchestrator import JobView, NodeView
from sim.scenario.recovery import simulated_recovery

AGENT_JOB = "gpuhealth-agent"
POLL_S = 0.05
# A step retried against the emulator: a scenario's API outage lasts seconds, so each step gives up soon and
# the next pass tries again (as on a real node, only faster).
DEMO_RETRY = NomadRetrySettings(attempts=4, initial_wait_s=0.2, max_wait_s=1.0, deadline_s=5.0)
WATCH_WAIT_S = 1.0  # the executor's blocking node query: short, so that stopping an agent is quick
# Training placement follows our metadata as a user's job would: never on a node we marked unhealthy.
UNHEALTHY_CONSTRAINT = {"LTarget": "${meta.gpuhealth.state}", "Operand": "!=", "RTarget": "unhealthy"}


def nomad_agent(settings: AgentSettings, library: NvmlLibrary, address: str) -> Agent:
    """A node's real agent on its local Nomad client agent at ``address``, with simulated recovery."""
    nomad = NomadSettings(address=address, watch_wait_s=WATCH_WAIT_S, retry=DEMO_RETRY)
    on_nomad = settings.model_copy(update={"orchestrator": "nomad", "nomad": nomad})
    return build_agent(
        on_nomad, library=library, clock=RealClock(), recovery_actions=simulated_recovery(on_nomad, library)
    )


@dataclass(frozen=True)
class NomadConnector:
    """Agents in another process reach their node's local client agent at its address."""

    addresses: dict[str, str]

    def agent_builder(self) -> Callable[[AgentSettings, NvmlLibrary], Agent]:
        return lambda settings, library: nomad_agent(settings, library, self.addresses[settings.node_name])


class NomadOrchestrator:
    """``sim.nomad`` (API, scheduler, drainer) on real time, with the agent's system job on every node."""

    kind = "nomad"

    def __init__(self) -> None:
        self._sim: NomadSim | None = None
        self._workloads = Workloads()
        self._gpus = 8
        self._gangs: list[frozenset[str]] = []  # the training job's allocation IDs, one set per gang seen
        self._central: NomadCentralDrains | None = None
        self._names: list[str] = []

    @property
    def sim(self) -> NomadSim:
        if self._sim is None:
            raise RuntimeError("the orchestrator is not started")
        return self._sim

    def start(self, nodes: int, gpus_per_node: int) -> list[str]:
        self._gpus = gpus_per_node
        self._sim = NomadSim(nodes=nodes, gpus_per_node=gpus_per_node, clock=RealClock()).start()
        # The agent runs as a system job, so a drain (IgnoreSystemJobs) leaves an allocation on the node.
        self._sim.register_job(_job(AGENT_JOB, "system", count=1, gpus=0))
        self._sim.wait_placed(AGENT_JOB, nodes, timeout=max(10.0, nodes * 0.05))
        self._names = node_names(nodes)
        return self._names

    def stop(self) -> None:
        if self._central is not None:
            self._central.close()
            self._central = None
        if self._sim is not None:
            self._sim.stop()
            self._sim = None

    def build_agent(self, settings: AgentSettings, library: NvmlLibrary) -> Agent:
        return nomad_agent(settings, library, self.sim.client_address(settings.node_name))

    def connector(self) -> NomadConnector:
        return NomadConnector({name: self.sim.client_address(name) for name in self._names})

    def central_remediator(self, workdir: Path) -> None:
        """None: on Nomad the agents still drain their own node (docs/nomad.md, "Least privilege")."""
        return

    # --- workloads -------------------------------------------------------------------------------------

    def start_workloads(self, workloads: Workloads, timeout_s: float) -> None:
        self._workloads = workloads
        expected = 0
        if workloads.training is not None:
            self._register_training(workloads.training)
            expected += workloads.training.nodes
        if workloads.inference is not None:
            self._register_inference(workloads.inference)
            expected += workloads.inference.replicas
        deadline = time.monotonic() + timeout_s
        while len(self._workload_allocs()) < expected:
            if time.monotonic() > deadline:
                placed = len(self._workload_allocs())
                raise TimeoutError(f"only {placed} of {expected} workload allocations run")
            time.sleep(POLL_S)
        self.job()  # the first gang, so that a later one counts as a restart

    def _register_training(self, job: TrainingJob) -> None:
        # A PodDisruptionBudget has no Nomad counterpart (a drain's deadline bounds it instead): not created.
        body = _job(job.name, "batch", count=job.nodes, gpus=self._gpus)
        body["Constraints"] = [dict(UNHEALTHY_CONSTRAINT)]
        self.sim.register_job(body)

    def _register_inference(self, service: InferenceService) -> None:
        self.sim.register_job(_job(service.name, "service", count=service.replicas, gpus=service.gpus))

    # --- reading back ----------------------------------------------------------------------------------

    def _workload_ids(self) -> set[str]:
        return {job.name for job in (self._workloads.training, self._workloads.inference) if job is not None}

    def _workload_allocs(self, job_id: str | None = None) -> list[dict[str, Any]]:
        wanted = {job_id} if job_id is not None else self._workload_ids()
        return [
            alloc for alloc in self.sim.state.allocations() if alloc["JobID"] in wanted and is_live(alloc)
        ]

    def _node_name(self, node_id: str) -> str:
        return str(self.sim.state.node(node_id)["Name"])

    def role_nodes(self, role: Role) -> list[str]:
        names = {str(node["ID"]): str(node["Name"]) for node in self.sim.state.nodes()}
        if role == "idle":
            busy = {names[alloc["NodeID"]] for alloc in self._workload_allocs()}
            return sorted(name for name in names.values() if name not in busy)
        job = self._workloads.training if role == "training" else self._workloads.inference
        if job is None:
            return []
        return sorted({names[alloc["NodeID"]] for alloc in self._workload_allocs(job.name)})

    def node(self, name: str) -> NodeView:
        try:
            found = self.sim.state.node(name)
        except NomadApiError:
            raise LookupError(f"no node {name}") from None
        return self._view(found, self._allocs_per_node())

    def tainted(self, names: Iterable[str]) -> set[str]:
        tainted = set()
        for name in names:
            with contextlib.suppress(NomadApiError):
                if self._view(self.sim.state.node(name), {}).taint is not None:
                    tainted.add(name)
        return tainted

    def nodes(self) -> list[NodeView]:
        per_node = self._allocs_per_node()
        views = [self._view(node, per_node) for node in self.sim.state.nodes()]
        return sorted(views, key=lambda view: view.name)

    def _allocs_per_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for alloc in self._workload_allocs():
            counts[alloc["NodeID"]] = counts.get(alloc["NodeID"], 0) + 1
        return counts

    @staticmethod
    def _view(node: dict[str, Any], allocs: dict[str, int]) -> NodeView:
        meta: dict[str, str] = node.get("Meta") or {}
        quarantine = meta.get(QUARANTINE)
        ours_ineligible = node.get("SchedulingEligibility") == INELIGIBLE and meta.get(INELIGIBLE_BY) == OWNER
        drained_for = meta.get(DRAINED)
        return NodeView(
            name=str(node["Name"]),
            state=meta.get(STATE),
            taint=quarantine.split(":", 1)[0] if quarantine else None,
            cordoned=ours_ineligible and drained_for is not None and drained_for == meta.get(INCIDENT),
            workload_pods=allocs.get(str(node["ID"]), 0),
        )

    def job(self) -> JobView | None:
        training = self._workloads.training
        if training is None:
            return None
        allocs = self._workload_allocs(training.name)
        self._note_gang(allocs, training.nodes)
        return JobView(
            restarts=max(len(self._gangs) - 1, 0),
            running_nodes=tuple(sorted(self._node_name(alloc["NodeID"]) for alloc in allocs)),
            expected_pods=training.nodes,
        )

    def _note_gang(self, allocs: list[dict[str, Any]], size: int) -> None:
        """A whole new set of allocations running, none of the previous set, is a restart of the job."""
        ids = frozenset(str(alloc["ID"]) for alloc in allocs)
        if len(ids) == size and (not self._gangs or not ids & self._gangs[-1]):
            self._gangs.append(ids)

    def api_outage(self, seconds: float) -> None:
        self.sim.outage(seconds, refuse_connections=True)


def _job(job_id: str, job_type: str, *, count: int, gpus: int) -> dict[str, Any]:
    """A Nomad JSON job: one group of ``count`` allocations, each asking for ``gpus`` ``nvidia/gpu``."""
    devices = [{"Name": "nvidia/gpu", "Count": gpus}] if gpus else []
    task = {
        "Name": "main",
        "Driver": "docker",
        "Resources": {"CPU": 100, "MemoryMB": 256, "Devices": devices},
    }
    group = {"Name": "main", "Count": count, "Tasks": [task]}
    return {"ID": job_id, "Name": job_id, "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [group]}
