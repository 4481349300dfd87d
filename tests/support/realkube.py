"""Per-test clusters on the shared real control plane (``control_plane.py``), and an agent rig for them.

The control plane is started once per test process; each test gets a :class:`Cluster` of its own: nodes
with names no other test uses (registered and kept alive by ``fake_kubelet.FakeKubelets``), its own
namespace, and an admin client. :class:`RealGpuNode` is ``scenario_rig.GpuNode`` for the real API server:
the same ``build_agent`` wiring, fake NVML, manual clock for the agent's debounce and the executor's retry
sleeps, but every read of the node goes through the API server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from control_plane import ControlPlane
from fake_kubelet import FakeKubelets
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from scenario_rig import ClockSleep

from agent.backends.fake_nvml import FakeNvml
from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.state_machine import DebounceConfig
from agent.wiring import build_agent
from gpuhealth.core.clock import ManualClock
from remediation.kubernetes.executor import KubernetesExecutor
from remediation.kubernetes.settings import RetrySettings
from remediation.plan import RemediationPolicy

HANG_GUARD_S = 20.0  # real controllers and watches: generous bounds, never a measurement
DWELL_S = 60.0
CLEAN_READINGS = 3
TAINT_KEY = "gpuhealth.io/unhealthy"

_serial = itertools.count()


def unique_prefix() -> str:
    """``<worker>-t<n>``: node and namespace names no other test of this run uses."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    return f"{worker}-t{next(_serial)}-{os.getpid() % 10000}"


def eventually(predicate: Callable[[], bool], timeout: float = HANG_GUARD_S, every: float = 0.05) -> bool:
    """True as soon as ``predicate`` holds; False after ``timeout`` (a hang guard)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


class Cluster:
    """Nodes, a namespace and an admin client of one test on the shared control plane."""

    def __init__(self, plane: ControlPlane, *, nodes: int = 2, gpus: int = 8) -> None:
        self.plane = plane
        prefix = unique_prefix()
        self.namespace = f"{prefix}-ns"
        self.node_names = [f"{prefix}-gpu-{i}" for i in range(nodes)]
        self.admin = plane.api_client()
        self.core = client.CoreV1Api(self.admin)
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        self.kubelets = FakeKubelets(plane, self.node_names, namespaces=[self.namespace], gpus=gpus).start()
        # A node is created with node.kubernetes.io/not-ready:NoSchedule (TaintNodesByCondition); the node
        # lifecycle controller removes it once it sees Ready=True. Tests start from nodes without it.
        assert eventually(self._untainted), "the node lifecycle controller never took the not-ready taint off"

    def _untainted(self) -> bool:
        return all(
            not [
                t
                for t in self.node(n)["spec"].get("taints") or []
                if t["key"].startswith("node.kubernetes.io/")
            ]
            for n in self.node_names
        )

    def close(self) -> None:
        self.kubelets.stop()
        with contextlib.suppress(ApiException):
            self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)
        self.admin.close()
        self.plane.check_running()

    def to_dict(self, obj: Any) -> dict[str, Any]:
        value: dict[str, Any] = self.admin.sanitize_for_serialization(obj)
        return value

    def node(self, name: str) -> dict[str, Any]:
        return self.to_dict(self.core.read_node(name))

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        listed = self.core.list_namespaced_pod(self.namespace, label_selector=selector or None)
        return [self.to_dict(pod) for pod in listed.items]

    def running(self, **labels: str) -> list[dict[str, Any]]:
        """Running, not terminating pods of the namespace carrying ``labels``."""
        return [
            pod
            for pod in self.pods(**labels)
            if pod["status"].get("phase") == "Running" and "deletionTimestamp" not in pod["metadata"]
        ]

    def node_events(self, name: str) -> list[dict[str, Any]]:
        """Core Events in ``default`` about node ``name``, in the order they were created (by the store's
        revision: timestamps have one-second resolution)."""
        listed = self.core.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
        events = [self.to_dict(e) for e in listed.items]
        return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))


class RealGpuNode:
    """``scenario_rig.GpuNode`` against the real API server: one node of a :class:`Cluster` and its agent."""

    def __init__(
        self, cluster: Cluster, node: str, clock: ManualClock, state_dir: Path, api_client: client.ApiClient
    ) -> None:
        self.cluster = cluster
        self.name = node
        self.clock = clock
        self.state_dir = state_dir
        self.api_client = api_client
        self.nvml = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
        self.sleep = ClockSleep(clock)
        self.policy = RemediationPolicy()
        self.dry_run = False
        self.executors: list[KubernetesExecutor] = []
        self.agents: list[Agent] = []
        self._agent: Agent | None = None

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            self._agent = self.start_agent()
        return self._agent

    @property
    def executor(self) -> KubernetesExecutor:
        return self.executors[-1]

    def start_agent(self) -> Agent:
        settings = AgentSettings(
            node_name=self.name,
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
            self.api_client,
            self.name,
            retry=settings.kubernetes.retry,
            clock=self.clock.now,
            sleep=self.sleep,
        )
        assert executor.wait_synced(HANG_GUARD_S), "the executor's watch never listed the node"
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
        feed = self.agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        assert feed.watching, "the XID watcher is not running"
        self.agent.wake.clear()
        assert self.nvml.inject_xid(gpu, xid)
        assert self.agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"

    # --- what the API server holds -------------------------------------------------------------------------

    def node(self) -> dict[str, Any]:
        return self.cluster.node(self.name)

    def condition(self, kind: str = "GPUHealthy") -> dict[str, Any] | None:
        return next((c for c in self.node()["status"].get("conditions", []) if c["type"] == kind), None)

    def label(self) -> str | None:
        labels: dict[str, str] = self.node()["metadata"].get("labels", {})
        return labels.get("gpuhealth.io/state")

    def taint(self) -> str | None:
        ours = [t for t in self.node()["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
        assert len(ours) <= 1
        return f"{ours[0].get('value')}:{ours[0]['effect']}" if ours else None

    def cordoned(self) -> bool:
        return bool(self.node()["spec"].get("unschedulable"))

    def events(self) -> list[str]:
        """Reasons of the agent's Events about this node (``GPUHealth*``; the node lifecycle controller
        records its own, such as RegisteredNode, whenever it gets to it)."""
        return [
            e["reason"] for e in self.cluster.node_events(self.name) if e["reason"].startswith("GPUHealth")
        ]

    def writes(self) -> int:
        return sum(executor.writes_total for executor in self.executors)

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
