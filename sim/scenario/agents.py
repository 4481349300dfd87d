"""One real agent per simulated node (``build_agent`` on a fake NVML), with the scenario's timing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agent.loop import Agent
from agent.settings import AgentSettings, FabricSettings, HttpSettings, KubernetesSettings
from agent.state.machine import DebounceConfig
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.plan.planner import RemediationPolicy
from sim.fakes.infiniband import FakeInfiniband
from sim.fakes.nvml import FakeNvml
from sim.fakes.structs import FakeEventData, FakeEventSet
from sim.scenario.faults import apply_fault
from sim.scenario.model import AgentKnobs, Fleet, GpuFault
from sim.scenario.orchestrator import Orchestrator
from sim.scenario.recovery import recovery_settings
from sim.scenario.ticker import AgentTicker

# A demo drain polls quickly: pods in the emulator go in milliseconds, not the minutes of a real node.
DEMO_DRAIN = DrainPolicy(poll_interval_s=0.1, retry_initial_s=0.2, retry_max_s=1.0, pod_timeout_s=20.0)
AGGREGATOR_TIMEOUT_S = 2.0
STOPPERS = 64
# A polled pass costs about 4 ms of CPU (8 fake GPUs read, checks, plan); all agents share this process.
# Large fleets poll less often so that the whole fleet stays near this many passes a second, but never
# slower than the agent's production default. XIDs wake an agent at once whatever its interval.
FLEET_PASSES_PER_S = 100.0
SLOWEST_INTERVAL_S = 10.0
HEARTBEATS_PER_INTERVAL = 5.0
THREADED_UP_TO = 64  # larger fleets are ticked by a pool (thousands of threads starve one interpreter)


# The XID watcher waits on NVML at most 0.1 s at a time so that it stops promptly. Real NVML waits in C
# without the interpreter lock; the fake waits in Python, so a thousand watchers in one process wake ten
# thousand times a second only to time out. At 0.9 s per wait they still cost a host 230 us of CPU a second
# per agent, more than its polled passes, and at 2,500 agents per host the wake-ups alone took most of a
# core. A pooled fleet's fake NVML therefore waits half a minute per call (an XID still ends the wait at
# once); stopping the fleet interrupts every wait first (``RunningFleet.stop``), so no watcher waits it out.
POOLED_EVENT_WAIT_MS = 30_000


class PooledFleetNvml(FakeNvml):
    """The fake NVML of a node in a pooled fleet: the same GPUs, fewer idle wake-ups of its XID watcher."""

    def nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:  # noqa: N802, N803
        return super().nvmlEventSetWait(eventSet, max(timeoutms, POOLED_EVENT_WAIT_MS))


@dataclass
class SimNode:
    """A node of the scenario: its fake GPUs and its agent."""

    name: str
    nvml: FakeNvml
    agent: Agent
    infiniband: FakeInfiniband | None = None


def scaled_knobs(fleet: Fleet) -> AgentKnobs:
    """The scenario's agent timing, slowed down for a fleet too large to poll every second here."""
    knobs = fleet.agent
    interval = max(knobs.interval_s, min(fleet.nodes / FLEET_PASSES_PER_S, SLOWEST_INTERVAL_S))
    heartbeat = max(knobs.heartbeat_s, interval * HEARTBEATS_PER_INTERVAL)
    return knobs.model_copy(update={"interval_s": interval, "heartbeat_s": heartbeat})


def time_scale(fleet: Fleet) -> float:
    """How much slower a scenario must play on this fleet: the scaled polling interval over its own.

    1 for a fleet small enough to poll at the scenario's interval; at 1000 nodes the agents poll every
    10 s instead of every 1 s, so a polled signal needs 10 times longer to be confirmed, and every other
    time of the scenario (injections, deadlines, recovery knobs) stretches with it (``Scenario.dilated``).
    """
    own = fleet.agent.interval_s
    if own <= 0:
        return 1.0
    return max(scaled_knobs(fleet).interval_s / own, 1.0)


def agent_settings(
    fleet: Fleet, name: str, state_root: Path, url: str, token_file: Path, *, central: bool = True
) -> AgentSettings:
    """One node's settings; ``central``: the aggregator's remediator drains (else the agent itself)."""
    knobs = scaled_knobs(fleet)
    return AgentSettings(
        node_name=name,
        state_dir=state_root / name,
        interval_s=knobs.interval_s,
        expected_gpu_count=fleet.gpus_per_node,
        debounce=DebounceConfig(
            polled_bad_readings=knobs.polled_bad_readings,
            clean_readings_to_recover=knobs.clean_readings_to_recover,
            min_dwell_s=knobs.min_dwell_s,
        ),
        policy=RemediationPolicy(
            drain=knobs.drain, drain_deadline_s=knobs.drain_deadline_s, partial_drain=knobs.partial_drain
        ),
        # The node's emulated kubelet PodResources socket (served only for a partial drain).
        kubernetes=KubernetesSettings(pod_resources_socket=str(state_root / name / "kubelet.sock")),
        # A partial drain needs the node's own PodResources socket, which a central remediator cannot read.
        drain_by="aggregator" if central and not knobs.partial_drain else "agent",
        drain=DEMO_DRAIN,
        recovery=recovery_settings(knobs),
        aggregator={
            "url": url,
            "token_file": token_file,
            "heartbeat_s": knobs.heartbeat_s,
            "permit_retry_s": knobs.permit_retry_s,
            "timeout_s": AGGREGATOR_TIMEOUT_S,
        },
        http=HttpSettings(enabled=False),
        # Each node's own fake sysfs tree (absent when the fleet has no IB ports), never the host's.
        fabric=FabricSettings(sysfs_root=state_root / name / "sysfs-infiniband"),
        log_level="error",
    )


class AgentFleet(Protocol):
    """The running agents as the engine sees them: faults go in, and the whole fleet stops."""

    def apply_fault(self, names: Sequence[str], gpu: int, fault: GpuFault) -> None:
        """Inject ``fault`` on GPU ``gpu`` of each node; raises FabricFaultError where it cannot apply."""
        ...

    def stop(self) -> None: ...


@dataclass
class RunningFleet:
    """The started agents, and the ticker that drives them when the fleet is too large for a thread each."""

    nodes: list[SimNode]
    ticker: AgentTicker | None

    def apply_fault(self, names: Sequence[str], gpu: int, fault: GpuFault) -> None:
        by_name = {node.name: node for node in self.nodes}
        for name in names:
            node = by_name[name]
            apply_fault(node.nvml, node.infiniband, gpu, fault)

    def stop(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
        for node in self.nodes:  # the XID watchers' long waits end now, not at their timeout
            node.nvml.interrupt_waits()
        stop_agents(self.nodes)


def start_agents(
    orchestrator: Orchestrator,
    fleet: Fleet,
    names: list[str],
    settings: Callable[[str], AgentSettings],
    progress: Callable[[int, int], None],
) -> RunningFleet:
    """Build and start an agent per node; ``progress(done, total)`` is called as they start.

    Up to ``THREADED_UP_TO`` nodes each agent runs its own loop (``Agent.start``, as ``gpuhealth agent``
    does); beyond, a small pool ticks them (see ``sim/scenario/ticker.py``).
    """
    threaded = len(names) <= THREADED_UP_TO
    nodes: list[SimNode] = []
    for index, name in enumerate(names):
        library = FakeNvml if threaded else PooledFleetNvml
        nvml = library(fleet.gpu_profile, fleet.gpus_per_node, seed=index, node_name=name)
        node_settings = settings(name)
        infiniband = (
            FakeInfiniband(node_settings.fabric.sysfs_root, fleet.ib_ports) if fleet.ib_ports else None
        )
        agent = orchestrator.build_agent(node_settings, nvml)
        nodes.append(SimNode(name, nvml, agent.start() if threaded else agent, infiniband))
        progress(index + 1, len(names))
    if threaded:
        return RunningFleet(nodes, None)
    ticker = AgentTicker([node.agent for node in nodes], scaled_knobs(fleet).interval_s)
    return RunningFleet(nodes, ticker.start())


def wait_ready(nodes: list[SimNode], timeout_s: float, progress: Callable[[int, int], None]) -> None:
    """Until every agent did a first pass, watches its node and its GPUs' XID events."""
    deadline = time.monotonic() + timeout_s
    for done, node in enumerate(nodes, start=1):
        feed = node.agent.parts.feed
        while not (node.agent.ready and (feed is None or feed.watching)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name}: the agent was not ready after {timeout_s:.0f} s")
            time.sleep(0.02)
        progress(done, len(nodes))


def stop_agents(nodes: list[SimNode]) -> None:
    """Stop every agent; many at once, since each waits for its threads (the XID watcher up to 0.2 s)."""
    with ThreadPoolExecutor(max_workers=STOPPERS, thread_name_prefix="gpuhealth-stop") as pool:
        list(pool.map(lambda node: node.agent.stop(timeout=2.0), nodes))
