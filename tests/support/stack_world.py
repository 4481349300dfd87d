"""A world for runbooks on the real stack: KWOK GPU nodes placed by kube-scheduler, the real workload
controllers a test asks for, a live aggregator whose central remediator drains with its own client, and
real agents (``drain_by: aggregator``) started on the nodes a test breaks.

:class:`Placements` watches the test's namespace and remembers every node a pod was ever bound to, so a test
can say that no pod made after the fault was placed on the broken node, even a pod that is gone by the time
the test looks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from control_plane import ControlPlane
from kubernetes import client, watch
from live_aggregator import LiveAggregator
from realkube import TAINT_KEY, Cluster
from waiting import HANG_GUARD_S

from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.state.machine import DebounceConfig
from agent.uplink.central_drain import CentralDrainExecutor
from agent.wiring import build_agent
from core.clock import ManualClock, RealClock, utc_now
from core.steps import Drain, Requeue
from remediation.kubernetes.central import CentralDrains
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.requeue.decisions import RequeuePolicy
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml

TOKEN = "realkube-stack-token-0123456789abcdef0123456789"
REMEDIATOR = "remediator-0"
FAST_DRAIN = DrainPolicy(poll_interval_s=0.1, retry_initial_s=0.1, retry_max_s=0.5, pod_timeout_s=30.0)
# The real controllers and scheduler work on their own clocks (JobSet's restart, the scheduler's backoff):
# a wait on them gets this much (a hang guard, far above the few seconds they take).
STACK_WAIT_S = 60.0


class Placements:
    """Every (pod uid, pod name, node) binding seen in a namespace since the watch began."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.api_client = plane.api_client()
        self.namespace = namespace
        self.bound: dict[str, tuple[str, str, float]] = {}  # uid -> (name, node, first seen bound)
        self._stream = watch.Watch()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placements", daemon=True)
        self._thread.start()
        assert self._ready.wait(HANG_GUARD_S), "the placement watch never started"

    def _run(self) -> None:
        core = client.CoreV1Api(self.api_client)
        listed = core.list_namespaced_pod(self.namespace).metadata
        assert listed is not None
        version = listed.resource_version
        self._ready.set()
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a watch that times out or is cut is started again
                for event in self._stream.stream(
                    core.list_namespaced_pod,
                    self.namespace,
                    resource_version=version,
                    timeout_seconds=5,
                    allow_watch_bookmarks=True,
                ):
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    if pod.spec is not None and pod.spec.node_name and pod.metadata.uid not in self.bound:
                        self.bound[pod.metadata.uid] = (
                            pod.metadata.name,
                            pod.spec.node_name,
                            time.monotonic(),
                        )
                    if self._stop.is_set():
                        return

    def on(self, node: str, *, since: float = 0.0) -> list[str]:
        """Names of the pods bound to ``node`` first seen at ``since`` (monotonic) or later."""
        return [name for name, where, at in self.bound.values() if where == node and at >= since]

    def close(self) -> None:
        self._stop.set()
        self._stream.stop()
        self._thread.join(10)
        self.api_client.close()


class StackWorld:
    """The cluster of one test on the real stack, its aggregator with the central remediator, its agents."""

    def __init__(
        self,
        cluster: Cluster,
        root: Path,
        monkeypatch: pytest.MonkeyPatch,
        *,
        requeue: RequeuePolicy | None = None,
        drain: DrainPolicy = FAST_DRAIN,
    ) -> None:
        self.cluster = cluster
        self.root = root
        self.clock = ManualClock(start=utc_now())
        self.central = CentralDrains(
            cluster.plane.api_client(), drain, requeue or RequeuePolicy(), owns_client=True
        )
        self.aggregator = LiveAggregator(
            root / "aggregator.db",
            self.clock,
            TOKEN,
            drain_for=self.central.drain_for,
            budget_min_nodes=2,
            remediator={"name": REMEDIATOR, "poll_s": 0.05},
        ).start()
        monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
        self.agents: dict[str, Agent] = {}
        self.nvml: dict[str, FakeNvml] = {}
        self.clients: list[client.ApiClient] = []
        self.policy = RemediationPolicy(drain=True, cordon=True, drain_deadline_s=STACK_WAIT_S)
        self.debounce = DebounceConfig()
        self.placements = Placements(cluster.plane, cluster.namespace)

    def agent(self, node: str) -> Agent:
        if node not in self.agents:
            settings = AgentSettings(
                node_name=node,
                state_dir=self.root / "agents" / node,
                policy=self.policy,
                drain_by="aggregator",
                debounce=self.debounce,
                aggregator={"url": self.aggregator.url, "permit_retry_s": 0.3, "timeout_s": 2},
                http=HttpSettings(enabled=False),
            )
            self.nvml[node] = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
            api_client = self.cluster.plane.api_client()
            self.clients.append(api_client)
            self.agents[node] = build_agent(
                settings, library=self.nvml[node], api_client=api_client, clock=RealClock()
            )
            self.tick(node)
        return self.agents[node]

    def tick(self, node: str) -> TickResult:
        agent = self.agents[node]
        result = agent.tick()
        assert agent.parts.link is not None
        agent.parts.link.deliver()
        return result

    def break_node(self, node: str, xid: int = 79) -> TickResult:
        """The XID on GPU 0 of ``node``; the agent's pass that handles it (taint, cordon, permit, order)."""
        agent = self.agent(node)
        feed = agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        agent.wake.clear()
        assert self.nvml[node].inject_xid(0, xid)
        assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"
        return self.tick(node)

    def heal(self, node: str) -> None:
        """The GPU is good again (after the reboot the XID asked for): clean readings from now on."""
        self.nvml[node].clear_faults(0)

    def central_executor(self, node: str) -> CentralDrainExecutor:
        executor = self.agents[node].parts.executor
        assert isinstance(executor, CentralDrainExecutor)
        return executor

    def finish_drain(self, node: str) -> TickResult:
        assert self.central_executor(node).wait_for_drain(STACK_WAIT_S), "the central drain did not end"
        return self.tick(node)

    def tainted(self, node: str) -> bool:
        return any(t["key"] == TAINT_KEY for t in self.cluster.node(node)["spec"].get("taints") or [])

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        for api_client in self.clients:
            api_client.close()
        self.placements.close()
        self.aggregator.stop()
        self.central.close()


def drain_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Drain | Requeue)
    ]


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {pod["metadata"]["uid"] for pod in pods}
