"""The scenario rig (loaded by conftest.py; import it as ``scenario_rig``): an emulated cluster, one GPU node with a fake NVML, and the real agent on it.

Everything real except the hardware and the cluster: ``build_agent`` wires the NVML backend, the XID event
watcher, the state machine, the state file and the Kubernetes executor (official client, over HTTP) exactly
as ``gpuhealth agent`` does. Time is a manual clock shared by the emulator, the agent and the executor's
retry sleeps, so debounce, dwell times and Retry-After cost no real time. Each test drives the loop one
pass at a time with ``tick()``, the way a runbook reads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from agent.backends.fake_nvml import FakeNvml
from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.state_machine import DebounceConfig
from agent.wiring import build_agent
from gpuhealth.core.clock import ManualClock
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from remediation.plan import RemediationPolicy
from sim.kube.harness import KubeSim

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


class GpuNode:
    """One GPU node of the emulated cluster with its fake GPUs and its agent."""

    def __init__(self, sim: KubeSim, clock: ManualClock, state_dir: Path) -> None:
        self.sim = sim
        self.clock = clock
        self.state_dir = state_dir
        self.nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)
        self.sleep = ClockSleep(clock)
        self.policy = RemediationPolicy()
        self.dry_run = False
        self.executors: list[KubernetesExecutor] = []
        self.agents: list[Agent] = []
        self._clients: list[client.ApiClient] = []
        self._agent: Agent | None = None

    # --- the agent -------------------------------------------------------------------------------------

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            self._agent = self.start_agent()
        return self._agent

    @property
    def executor(self) -> KubernetesExecutor:
        return self.executors[-1]

    def start_agent(self) -> Agent:
        """A new agent process on this node: same state directory, new executor and watch."""
        api_client = self.sim.api_client()
        self._clients.append(api_client)
        settings = AgentSettings(
            node_name=NODE,
            state_dir=self.state_dir,
            dry_run=self.dry_run,
            debounce=DebounceConfig(min_dwell_s=DWELL_S, clean_readings_to_recover=CLEAN_READINGS),
            policy=self.policy,
            kubernetes={
                "retry": RetrySettings(attempts=6, initial_wait_s=0.2, max_wait_s=5.0, deadline_s=10.0)
            },
            http=HttpSettings(enabled=False),
        )
        executor = KubernetesExecutor(
            api_client, NODE, retry=settings.kubernetes.retry, clock=self.clock.now, sleep=self.sleep
        )
        assert executor.wait_synced(HANG_GUARD_S), "the executor's watch never listed the node"
        self.executors.append(executor)
        agent = build_agent(settings, library=self.nvml, clock=self.clock, executor=executor)
        self.agents.append(agent)
        self._agent = agent
        return agent

    def restart_agent(self) -> Agent:
        """The agent process ends (pod restarted) and a new one starts on the same node."""
        self.agent.close()
        self._agent = None
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

    def writes(self) -> int:
        """Mutating requests sent by every agent of this node so far."""
        return sum(executor.writes_total for executor in self.executors)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        for api_client in self._clients:
            api_client.close()


def eventually(predicate: Callable[[], bool], timeout: float = HANG_GUARD_S) -> bool:
    """True as soon as ``predicate`` holds (polled every 10 ms); False after ``timeout`` (a hang guard)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
