"""Runbook: the central remediator drains and requeues on the permits the aggregator granted (docs/drain.md,
docs/security.md).

An 8-node emulated fleet with every controller on real time; a live aggregator whose remediator drains with
its own API client (the ServiceAccount the chart gives the aggregator); real agents with ``drain_by:
aggregator``, whose own executor only marks, taints and cordons their node. Each test drives the agents'
loops one pass at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from live_aggregator import LiveAggregator
from sqlalchemy import create_engine, update
from waiting import HANG_GUARD_S, wait_until

from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.uplink.central_drain import CentralDrainExecutor
from agent.uplink.client import AggregatorClient, NotFound, PermitLapsed
from agent.wiring import build_agent
from aggregator.remediator import Remediator
from aggregator.store.tables import drains as drains_table
from core.aggregator_api import OPEN_DRAIN_PHASES
from core.clock import ManualClock, RealClock, utc_now
from core.steps import Drain, Requeue
from remediation.kubernetes.central import CentralDrains
from remediation.kubernetes.drain.policy import DrainPolicy
from remediation.kubernetes.requeue.decisions import REQUEUED_ANNOTATION, RequeuePolicy
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml
from sim.kube.harness import KubeSim, running_kube_sim

NS = "train"
TOKEN = "central-drain-scenario-token-0123456789"
FLEET = 8
REMEDIATOR = "remediator-0"
JOBSET_KEY = "jobsets.jobset.x-k8s.io"
PDB_KEY = "poddisruptionbudgets.policy"
FAST_DRAIN = DrainPolicy(poll_interval_s=0.05, retry_initial_s=0.05, retry_max_s=0.2, pod_timeout_s=10.0)


@pytest.fixture
def kube() -> Iterator[KubeSim]:
    with running_kube_sim(clock=RealClock(), nodes=FLEET, workloads=True, bookmark_interval_s=0.2) as sim:
        sim.store.create("namespaces", {"metadata": {"name": NS}})
        yield sim


class World:
    """The fleet, the aggregator with its remediator, and the agents started on the nodes a test breaks."""

    def __init__(self, kube: KubeSim, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kube = kube
        self.root = root
        self.clock = ManualClock(start=utc_now())
        self.central = CentralDrains(kube.api_client(), FAST_DRAIN, RequeuePolicy(), owns_client=True)
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
        self.policy = RemediationPolicy(drain=True, cordon=True, drain_deadline_s=HANG_GUARD_S)

    @property
    def remediator(self) -> Remediator:
        remediator = self.aggregator.app.state.remediator
        assert isinstance(remediator, Remediator)
        return remediator

    def agent(self, node: str) -> Agent:
        if node not in self.agents:
            settings = AgentSettings(
                node_name=node,
                state_dir=self.root / "agents" / node,
                policy=self.policy,
                drain_by="aggregator",
                aggregator={"url": self.aggregator.url, "permit_retry_s": 0.3, "timeout_s": 2},
                http=HttpSettings(enabled=False),
            )
            self.nvml[node] = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
            agent = build_agent(
                settings, library=self.nvml[node], api_client=self.kube.api_client(), clock=RealClock()
            )
            self.agents[node] = agent
            self.tick(node)
        return self.agents[node]

    def restart(self, node: str) -> Agent:
        """The node's agent process ends and a new one starts with the same state directory."""
        self.agents.pop(node).close()
        return self.agent(node)

    def tick(self, node: str, *, deliver: bool = True) -> TickResult:
        agent = self.agents[node]
        result = agent.tick()
        if deliver:
            assert agent.parts.link is not None
            agent.parts.link.deliver()
        return result

    def break_node(self, node: str, *, deliver: bool = True) -> TickResult:
        agent = self.agent(node)
        feed = agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        agent.wake.clear()
        assert self.nvml[node].inject_xid(0, 79)
        assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"
        return self.tick(node, deliver=deliver)

    def central_executor(self, node: str) -> CentralDrainExecutor:
        executor = self.agents[node].parts.executor
        assert isinstance(executor, CentralDrainExecutor)
        return executor

    def client(self) -> AggregatorClient:
        return AggregatorClient(self.aggregator.url, TOKEN, timeout_s=5.0, retries=1)

    def running(self, **labels: str) -> list[dict[str, Any]]:
        return [
            pod
            for pod in self.kube.store.list("pods", NS)
            if pod["status"].get("phase") == "Running"
            and "deletionTimestamp" not in pod["metadata"]
            and all(pod["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
        ]

    def node(self, name: str) -> dict[str, Any]:
        node = self.kube.store.get("nodes", None, name)
        assert node is not None
        return node

    def tainted(self, name: str) -> bool:
        return any(t["key"] == "gpuhealth.io/unhealthy" for t in self.node(name)["spec"].get("taints") or [])

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        self.aggregator.stop()
        self.remediator.wait_idle(HANG_GUARD_S)
        self.central.close()


@pytest.fixture
def world(kube: KubeSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = World(kube, tmp_path, monkeypatch)
    yield made
    made.close()


def start_jobset(world: World, *, min_available: int = 3) -> dict[str, str]:
    """A 4-node JobSet, each pod taking a whole node, protected by a PDB; returns its pod labels."""
    container = {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}
    pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [container]}
    job = {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 3, "template": {"spec": pod}}}
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": job}]},
    }
    labels = {"jobset.sigs.k8s.io/jobset-name": "llm"}
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": labels}},
    }
    world.kube.store.create(PDB_KEY, pdb)
    world.kube.store.create(JOBSET_KEY, body)
    wait_until(lambda: len(world.running(**labels)) == 4, message="the JobSet's 4 pods to run")
    return labels


def drain_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Drain | Requeue)
    ]


def test_xid_79_the_agent_orders_the_drain_and_the_remediator_drains_and_restarts_the_jobset(
    world: World,
) -> None:
    """XID 79 on a JobSet node: the agent taints and cordons its node itself, takes the permit and orders
    the drain; the remediator evicts the gang pod and restarts the JobSet (suspend toggle) once; the agent
    reads the outcome back into its timeline, and recovery may go on (the drain ended)."""
    labels = start_jobset(world)
    before = {p["metadata"]["uid"] for p in world.running(**labels)}
    bad = world.running(**labels)[0]["spec"]["nodeName"]
    world.agent(bad)

    handled = world.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    [(kind, ok, detail)] = drain_results(handled)
    assert (kind, ok) == ("Drain", True) and detail.startswith("drain ordered from the central remediator")
    assert world.tainted(bad) and world.node(bad)["spec"].get("unschedulable") is True

    executor = world.central_executor(bad)
    assert executor.wait_for_drain(HANG_GUARD_S), "the central drain did not end"
    news = drain_results(world.tick(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Drain", True), ("Requeue", True)]
    assert news[0][2].startswith("drain complete") and "requeued (suspend-toggle)" in news[1][2]
    state = executor.drain_state
    assert state is not None and state.phase == "complete" and state.incident_id == incident.id

    def restarted_elsewhere() -> bool:
        pods = world.running(**labels)
        return len(pods) == 4 and not before & {p["metadata"]["uid"] for p in pods}

    wait_until(restarted_elsewhere, message="four new Running pods of the JobSet")
    jobset = world.kube.store.get(JOBSET_KEY, NS, "llm")
    assert jobset is not None and jobset["metadata"]["annotations"][REQUEUED_ANNOTATION] == incident.id
    assert drain_results(world.tick(bad)) == []  # never ordered twice for one incident


def test_the_remediator_never_drains_without_an_active_permit_for_the_node(world: World) -> None:
    """A drain order for a permit that was released is refused (409), and an order whose permit is released
    before the remediator runs it fails without a single eviction: the remediator acts on nothing the
    aggregator did not grant."""
    labels = start_jobset(world)
    bad = world.running(**labels)[0]["spec"]["nodeName"]
    world.agent(bad)
    world.remediator.stop()  # orders wait in the store while it is stopped

    world.break_node(bad)
    with world.client() as oncall:
        [permit] = oncall.permits()
        ordered = oncall.drain_of(permit.id)
        assert ordered.phase == "requested"
        oncall.release_permit(permit.id)
        with pytest.raises(PermitLapsed, match="no longer active"):
            oncall.order_drain(permit.id, deadline_s=60)
        with pytest.raises(NotFound):
            oncall.drain_of(permit.id + 100)

    assert world.remediator.run_once() == 0
    with world.client() as oncall:
        refused = oncall.drain_of(permit.id)
    assert refused.phase == "failed" and "permit is no longer active" in refused.detail
    assert len(world.running(**labels)) == 4  # nothing was evicted


def test_a_drain_interrupted_by_an_aggregator_restart_is_resumed_by_the_remediator(world: World) -> None:
    """The aggregator stopped after it had taken the order and before the drain ran (its row says running,
    leased to this remediator's name): the restarted aggregator's remediator resumes it at once and drains
    the node; the agent, which kept its permit, reads the outcome."""
    labels = start_jobset(world)
    bad = world.running(**labels)[0]["spec"]["nodeName"]
    world.agent(bad)
    world.remediator.stop()
    world.break_node(bad)
    world.aggregator.stop()
    _take_and_crash(world)

    world.aggregator.start()
    assert world.central_executor(bad).wait_for_drain(HANG_GUARD_S), "the resumed drain did not end"
    news = drain_results(world.tick(bad))
    assert ("Drain", True) in [(kind, ok) for kind, ok, _ in news]
    with world.client() as oncall:
        [permit] = oncall.permits()
        resumed = oncall.drain_of(permit.id)
    assert resumed.phase == "complete"
    assert all(pod["spec"]["nodeName"] != bad for pod in world.running(**labels))


def _take_and_crash(world: World) -> None:
    """What a crashed aggregator leaves: the order claimed by this remediator, running, its lease still on."""
    engine = create_engine(f"sqlite:///{world.root / 'aggregator.db'}")
    try:
        with engine.begin() as conn:
            lease = world.clock.now() + timedelta(hours=1)
            changed = conn.execute(
                update(drains_table)
                .where(drains_table.c.phase == "requested")
                .values(phase="running", owner=REMEDIATOR, lease_until=lease)
            ).rowcount
            assert changed == 1
    finally:
        engine.dispose()
    assert OPEN_DRAIN_PHASES == ("requested", "running")


def test_a_restarted_agent_follows_the_drain_its_previous_process_ordered(world: World) -> None:
    """The agent restarts while the remediator drains its node: the new process orders nothing again (its
    state file remembers the drain), finds the node's drain through the aggregator and sees it end, so
    recovery can go on."""
    labels = start_jobset(world)
    bad = world.running(**labels)[0]["spec"]["nodeName"]
    world.agent(bad)
    handled = world.break_node(bad)
    incident = handled.health.incident
    assert incident is not None

    world.restart(bad)
    executor = world.central_executor(bad)
    assert executor.wait_for_drain(HANG_GUARD_S), "the adopted drain did not end"
    state = executor.drain_state
    assert state is not None and state.incident_id == incident.id and state.phase == "complete"
    assert "Drain" not in [kind for kind, _, _ in drain_results(world.tick(bad))]
    with world.client() as oncall:
        assert len(oncall.permits(active_only=False)) == 1  # one permit, one drain: never ordered twice


def test_with_the_aggregator_down_the_agent_still_taints_and_cordons_its_node(world: World) -> None:
    """No aggregator: the agent marks, taints and cordons its node with its own identity, and orders no
    drain (no permit); nothing is evicted."""
    labels = start_jobset(world)
    bad = world.running(**labels)[0]["spec"]["nodeName"]
    world.agent(bad)
    world.aggregator.stop()

    handled = world.break_node(bad, deliver=False)
    assert world.tainted(bad) and world.node(bad)["spec"].get("unschedulable") is True
    assert drain_results(handled) == []
    assert any("no permit for drain" in note for note in handled.notes)
    assert len(world.running(**labels)) == 4
