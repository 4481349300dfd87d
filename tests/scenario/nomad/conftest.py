"""The Nomad runbook rig: an emulated Nomad (``sim/nomad``), one GPU node with a fake NVML, and the real agent
on it (``build_agent`` with the Nomad executor talking to the node's local client agent over HTTP).

As in the Kubernetes rig (``tests/support/scenario_rig.py``), time is a manual clock shared by the emulator,
the agent and the executor's retry sleeps, and each test drives the loop one pass at a time with ``tick()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.backends.fake_nvml import FakeNvml
from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.state_machine import DebounceConfig
from agent.wiring import build_agent
from gpuhealth.core.clock import ManualClock
from remediation.nomad.connect import connect_nomad_executor
from remediation.nomad.executor import NomadExecutor
from remediation.nomad.settings import NomadRetrySettings, NomadSettings
from remediation.plan import RemediationPolicy
from sim.nomad.harness import NomadSim, running_nomad_sim

NODE = "gpu-node-0"
HANG_GUARD_S = 5.0
DWELL_S = 60.0
CLEAN_READINGS = 3


class ClockSleep:
    """The executor's retry sleep: records each wait and moves the shared manual clock by it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(seconds)


class NomadGpuNode:
    """One GPU client node of the emulated Nomad with its fake GPUs and its agent."""

    def __init__(self, sim: NomadSim, clock: ManualClock, state_dir: Path) -> None:
        self.sim = sim
        self.clock = clock
        self.state_dir = state_dir
        self.nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
        self.sleep = ClockSleep(clock)
        self.dwell_s, self.clean_readings = DWELL_S, CLEAN_READINGS
        self.policy = RemediationPolicy()
        self.dry_run = False
        self.token: str | None = None
        self.executors: list[NomadExecutor] = []
        self.agents: list[Agent] = []
        self._agent: Agent | None = None

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            self._agent = self.start_agent()
        return self._agent

    @property
    def executor(self) -> NomadExecutor:
        return self.executors[-1]

    def start_agent(self) -> Agent:
        """A new agent process on this node: same state directory, new executor and watch."""
        nomad = NomadSettings(
            address=self.sim.client_address(NODE),
            watch_wait_s=0.2,
            retry=NomadRetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0),
        )
        settings = AgentSettings(
            node_name=NODE,
            orchestrator="nomad",
            nomad=nomad,
            state_dir=self.state_dir,
            dry_run=self.dry_run,
            debounce=DebounceConfig(min_dwell_s=DWELL_S, clean_readings_to_recover=CLEAN_READINGS),
            policy=self.policy,
            http=HttpSettings(enabled=False),
        )
        environ = {"NOMAD_TOKEN": self.token} if self.token else {}
        executor = connect_nomad_executor(
            nomad, environ=environ, sleep=self.sleep, monotonic=self.clock.monotonic
        )
        assert executor.wait_synced(HANG_GUARD_S), "the executor's watch never read the node"
        self.executors.append(executor)
        agent = build_agent(settings, library=self.nvml, clock=self.clock, executor=executor)
        self.agents.append(agent)
        self._agent = agent
        return agent

    def restart_agent(self) -> Agent:
        self.agent.close()
        self._agent = None
        return self.agent

    def tick(self) -> TickResult:
        return self.agent.tick()

    def ticks(self, count: int, *, every_s: float = 10.0) -> list[TickResult]:
        results = []
        for _ in range(count):
            self.clock.advance(every_s)
            results.append(self.tick())
        return results

    def xid(self, xid: int, gpu: int = 0) -> None:
        """An XID on one GPU, delivered by NVML's event thread; returns once it has woken the loop."""
        feed = self.agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        assert feed.watching, "the XID watcher is not running"
        self.agent.wake.clear()
        assert self.nvml.inject_xid(gpu, xid)
        assert self.agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"

    # --- what Nomad holds --------------------------------------------------------------------------------

    def node(self) -> dict[str, Any]:
        node: dict[str, Any] = self.sim.state.node(NODE)
        return node

    def meta(self) -> dict[str, str]:
        return {k: v for k, v in self.node()["Meta"].items() if k.startswith("gpuhealth.")}

    def state(self) -> str | None:
        return self.meta().get("gpuhealth.state")

    def eligible(self) -> bool:
        return self.node()["SchedulingEligibility"] == "eligible"

    def index(self) -> int:
        return int(self.node()["ModifyIndex"])

    def writes(self) -> int:
        return sum(executor.writes_total for executor in self.executors)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()


def eventually(predicate: Callable[[], bool], timeout: float = HANG_GUARD_S) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[NomadSim]:
    """A bare emulated Nomad (no scheduler: nothing but the agent writes) with two GPU nodes."""
    with running_nomad_sim(nodes=2, clock=clock, controllers=False) as nomad:
        yield nomad


@pytest.fixture
def gpu_node(sim: NomadSim, clock: ManualClock, tmp_path: Path) -> Iterator[NomadGpuNode]:
    """``gpu-node-0`` with 8 fake H100s and its agent (started on first use)."""
    node = NomadGpuNode(sim, clock, tmp_path / "state")
    yield node
    node.close()
