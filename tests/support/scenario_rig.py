"""The scenario rig (import it as ``scenario_rig``): an emulated orchestrator, one GPU node with a fake NVML,
and the real agent on it, for the runbook scenarios of ``tests/scenario/kube`` and ``tests/scenario/nomad``.

Everything real except the hardware and the orchestrator: ``build_agent`` wires the NVML backend, the XID
event watcher, the state machine, the state file and the orchestrator's executor (over HTTP, with the
official client) exactly as ``gpuhealth agent`` does. Time is a manual clock shared by the emulator, the
agent and the executor's retry sleeps, so debounce, dwell times and Retry-After cost no real time. Each test
drives the loop one pass at a time with ``tick()``, the way a runbook reads.

:class:`GpuNodeRig` is what both orchestrators share (the agent's life, the loop, the hardware); the small
per-orchestrator part is a subclass that says how to build the settings and the executor, and how to read
what the orchestrator holds about the node: :class:`KubeGpuNode` (the Node object: condition, label,
taint, cordon, Events) and :class:`NomadGpuNode` (the client node: dynamic metadata, eligibility).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from kubernetes import client
from waiting import HANG_GUARD_S

from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, FabricSettings, HttpSettings
from agent.state.machine import DebounceConfig
from agent.wiring import build_agent
from core.clock import ManualClock
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from remediation.nomad.connect import connect_nomad_executor
from remediation.nomad.executor import NomadExecutor
from remediation.nomad.settings import NomadRetrySettings, NomadSettings
from remediation.plan.planner import RemediationPolicy
from sim.fakes.infiniband import FakeInfiniband
from sim.fakes.nvml import FakeNvml
from sim.kube.harness import KubeSim
from sim.nomad.harness import NomadSim

NODE = "gpu-node-0"
DWELL_S = 60.0
CLEAN_READINGS = 3

ExecutorT = TypeVar("ExecutorT", KubernetesExecutor, NomadExecutor)


class ClockSleep:
    """The executor's retry sleep: records each wait and moves the shared manual clock by it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


class GpuNodeRig(ABC, Generic[ExecutorT]):
    """One GPU node of an emulated orchestrator with its fake GPUs and its agent (started on first use).

    A test may change ``policy``, ``dry_run``, ``dwell_s`` or ``clean_readings`` before the agent starts (or
    before ``restart_agent()``); each new agent reads them.
    """

    def __init__(self, clock: ManualClock, state_dir: Path, node: str = NODE) -> None:
        self.name = node
        self.clock = clock
        self.state_dir = state_dir
        self.nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
        # The node's own InfiniBand tree (8 ports, all up), never the host's /sys/class/infiniband.
        self.infiniband = FakeInfiniband(state_dir.parent / f"{state_dir.name}-infiniband", devices=8)
        self.sleep = ClockSleep(clock)
        self.dwell_s, self.clean_readings = DWELL_S, CLEAN_READINGS
        self.policy = RemediationPolicy()
        # Who drains: these runbooks drive the agent's own drain; the central remediator's runbooks attach
        # one to the aggregator and set "aggregator".
        self.drain_by = "agent"
        self.dry_run = False
        self.executors: list[ExecutorT] = []
        self.agents: list[Agent] = []
        self._agent: Agent | None = None

    # --- the per-orchestrator part ---------------------------------------------------------------------

    @abstractmethod
    def settings(self, **common: Any) -> AgentSettings:
        """The agent's settings: ``common`` (node, state, debounce, policy, no HTTP) plus the orchestrator's."""

    @abstractmethod
    def connect(self, settings: AgentSettings) -> ExecutorT:
        """A new executor of this node (its watch started), as the agent's process would build it."""

    # --- the agent -------------------------------------------------------------------------------------

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            self._agent = self.start_agent()
        return self._agent

    @property
    def executor(self) -> ExecutorT:
        return self.executors[-1]

    def start_agent(self) -> Agent:
        """A new agent process on this node: same state directory, new executor and watch."""
        settings = self.settings(
            node_name=self.name,
            state_dir=self.state_dir,
            dry_run=self.dry_run,
            debounce=DebounceConfig(min_dwell_s=self.dwell_s, clean_readings_to_recover=self.clean_readings),
            policy=self.policy,
            drain_by=self.drain_by,
            http=HttpSettings(enabled=False),
            fabric=FabricSettings(sysfs_root=self.infiniband.root),
        )
        executor = self.connect(settings)
        assert executor.wait_synced(HANG_GUARD_S), "the executor's watch never read the node"
        self.executors.append(executor)
        agent = build_agent(settings, library=self.nvml, clock=self.clock, executor=executor)
        self.agents.append(agent)
        self._agent = agent
        return agent

    def restart_agent(self, meanwhile: Callable[[], object] | None = None) -> Agent:
        """The agent process ends (pod or allocation restarted) and a new one starts on the same node;
        ``meanwhile`` runs between the two (say, the node's state file is lost)."""
        self.agent.close()
        self._agent = None
        if meanwhile is not None:
            meanwhile()
        return self.agent

    def tick(self) -> TickResult:
        """One pass of the loop."""
        return self.agent.tick()

    def ticks(self, count: int, *, every_s: float = 10.0) -> list[TickResult]:
        """``count`` passes, ``every_s`` apart on the manual clock."""
        results = []
        for _ in range(count):
            self.clock.advance(every_s)
            results.append(self.tick())
        return results

    def writes(self) -> int:
        """Mutating requests sent by every agent of this node so far."""
        return sum(executor.writes_total for executor in self.executors)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()

    # --- the hardware ----------------------------------------------------------------------------------

    def xid(self, xid: int, gpu: int = 0) -> None:
        """An XID on one GPU, delivered by NVML's event thread; returns once it has woken the loop."""
        feed = self.agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        assert feed.watching, "the XID watcher is not running"
        self.agent.wake.clear()
        assert self.nvml.inject_xid(gpu, xid)
        assert self.agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"


class KubeGpuNode(GpuNodeRig[KubernetesExecutor]):
    """``gpu-node-0`` of the emulated Kubernetes API server; the executor talks to it with the official client."""

    def __init__(self, sim: KubeSim, clock: ManualClock, state_dir: Path) -> None:
        super().__init__(clock, state_dir)
        self.sim = sim
        self._clients: list[client.ApiClient] = []

    def settings(self, **common: Any) -> AgentSettings:
        retry = RetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0)
        return AgentSettings(**common, kubernetes={"retry": retry})

    def connect(self, settings: AgentSettings) -> KubernetesExecutor:
        api_client = self.sim.api_client()
        self._clients.append(api_client)
        return KubernetesExecutor(
            api_client, NODE, retry=settings.kubernetes.retry, clock=self.clock.now, sleep=self.sleep
        )

    def close(self) -> None:
        super().close()
        for api_client in self._clients:
            api_client.close()

    # --- what the API server holds ---------------------------------------------------------------------

    def node(self) -> dict[str, Any]:
        node = self.sim.store.get("nodes", None, NODE)
        assert node is not None
        return node

    def condition(self) -> dict[str, Any] | None:
        return next(
            (c for c in self.node()["status"].get("conditions", []) if c["type"] == "GPUHealthy"), None
        )

    def label(self) -> str | None:
        labels: dict[str, str] = self.node()["metadata"].get("labels", {})
        return labels.get("gpuhealth.io/state")

    def taint(self) -> str | None:
        taints = self.node()["spec"].get("taints") or []
        ours = [t for t in taints if t["key"] == "gpuhealth.io/unhealthy"]
        assert len(ours) <= 1
        return f"{ours[0].get('value')}:{ours[0]['effect']}" if ours else None

    def cordoned(self) -> bool:
        return bool(self.node()["spec"].get("unschedulable"))

    def version(self) -> str:
        return str(self.node()["metadata"]["resourceVersion"])

    def events(self) -> list[str]:
        """Reasons of the Events about this node (in the store's order, not by time)."""
        return [
            event["reason"]
            for event in self.sim.store.list("events", "default")
            if event.get("involvedObject", {}).get("name") == NODE
        ]


class NomadGpuNode(GpuNodeRig[NomadExecutor]):
    """``gpu-node-0`` of the emulated Nomad; the executor talks to the node's local client agent over HTTP."""

    def __init__(self, sim: NomadSim, clock: ManualClock, state_dir: Path) -> None:
        super().__init__(clock, state_dir)
        self.sim = sim
        self.token: str | None = None

    def settings(self, **common: Any) -> AgentSettings:
        nomad = NomadSettings(
            address=self.sim.client_address(NODE),
            watch_wait_s=0.2,
            retry=NomadRetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0),
        )
        return AgentSettings(**common, orchestrator="nomad", nomad=nomad)

    def connect(self, settings: AgentSettings) -> NomadExecutor:
        environ = {"NOMAD_TOKEN": self.token} if self.token else {}
        return connect_nomad_executor(
            settings.nomad, environ=environ, sleep=self.sleep, monotonic=self.clock.monotonic
        )

    # --- what Nomad holds ------------------------------------------------------------------------------

    def node(self) -> dict[str, Any]:
        node: dict[str, Any] = self.sim.state.node(NODE)
        return node

    def meta(self) -> dict[str, str]:
        return {k: v for k, v in self.node()["Meta"].items() if k.startswith("gpuhealth.")}

    def state(self) -> str | None:
        return self.meta().get("gpuhealth.state")

    def eligible(self) -> bool:
        eligibility: str = self.node()["SchedulingEligibility"]
        return eligibility == "eligible"

    def index(self) -> int:
        return int(self.node()["ModifyIndex"])
