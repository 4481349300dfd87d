"""Shared by the agent benchmarks: real agents on fake GPUs against an emulated Kubernetes API.

Each :class:`FleetNode` is what ``gpuhealth agent`` runs on one node (``agent.wiring.build_agent``: NVML
backend, XID watcher, state machine, state file, Kubernetes executor over HTTP), with a ``FakeNvml`` in
place of the driver. Many run in one process, as the demo does.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agent.loop import Agent
from agent.settings import AgentSettings, HttpSettings
from agent.state.machine import DebounceConfig
from agent.wiring import build_agent
from remediation.kubernetes.executor import KubernetesExecutor
from sim.fakes.nvml import FakeNvml


class ApiServer(Protocol):
    """What the fleet needs of an API server: a new client of it (``KubeSim``, or a real control plane)."""

    def api_client(self) -> Any: ...


@dataclass
class FleetNode:
    """One node: its name, its fake NVML and its agent."""

    name: str
    nvml: FakeNvml
    agent: Agent

    @property
    def executor(self) -> KubernetesExecutor:
        executor = self.agent.parts.executor
        if not isinstance(executor, KubernetesExecutor):
            raise TypeError("the fleet's agents use the Kubernetes executor")
        return executor


def fleet_settings(name: str, state_dir: Path, **overrides: Any) -> AgentSettings:
    """Benchmark settings: defaults, no HTTP endpoint, a quick recovery so a node can be reused."""
    values: dict[str, Any] = {
        "node_name": name,
        "state_dir": state_dir / name,
        "http": HttpSettings(enabled=False),
        "debounce": DebounceConfig(min_dwell_s=0, clean_readings_to_recover=1),
    }
    values.update(overrides)
    return AgentSettings(**values)


@contextlib.contextmanager
def agent_fleet(
    sim: ApiServer, names: list[str], *, gpus: int = 8, **overrides: Any
) -> Iterator[list[FleetNode]]:
    """An agent (not started) per node name, closed on exit."""
    nodes: list[FleetNode] = []
    with tempfile.TemporaryDirectory(prefix="gpuhealth-bench-") as state_root:
        try:
            for index, name in enumerate(names):
                nvml = FakeNvml("h100_sxm", gpus, seed=index, node_name=name)
                settings = fleet_settings(name, Path(state_root), **overrides)
                agent = build_agent(settings, library=nvml, api_client=sim.api_client())
                nodes.append(FleetNode(name, nvml, agent))
            yield nodes
        finally:
            for node in nodes:
                node.agent.stop()


def percentile(samples: list[float], fraction: float) -> float:
    """The ``fraction`` quantile by the nearest-rank method (p99 of 200 samples is the 198th)."""
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), math.ceil(fraction * len(ordered))))
    return ordered[rank - 1]
