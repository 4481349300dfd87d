"""Runbook on Nomad: the central remediator drains and restarts batch jobs on the aggregator's permits.

An emulated Nomad region with ACLs on: the agent runs with a token of the shipped agent policy
(``deploy/nomad/gpuhealth-agent.policy.hcl``: node write, agent read, read-job; no alloc-lifecycle), the
aggregator's remediator with a token of the shipped remediator policy. XID 79 on a node of a batch training
job: the agent quarantines its node (metadata, ineligible) and orders the drain; the remediator drains it
through the servers, records the drain in the node's metadata and stops every allocation of the job so it
is placed again on healthy nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_aggregator import LiveAggregator
from waiting import HANG_GUARD_S, wait_until

from agent.loop import Agent, TickResult
from agent.settings import AgentSettings, HttpSettings
from agent.uplink.central_drain import CentralDrainExecutor
from agent.wiring import build_agent
from core.clock import ManualClock, RealClock, utc_now
from core.steps import Drain, Requeue
from remediation.nomad.api import NomadApi
from remediation.nomad.central import NomadCentralDrains
from remediation.nomad.drain import NomadDrainSetup
from remediation.nomad.errors import NomadForbidden
from remediation.nomad.settings import NomadSettings
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml
from sim.nomad.harness import NomadSim, running_nomad_sim
from tests.deploy.nomad_hcl import AGENT_POLICY, REMEDIATOR_POLICY

TOKEN = "central-drain-nomad-token-0123456789"
FLEET = 8


def job(job_id: str, job_type: str, count: int = 1, gpus: int = 0) -> dict[str, Any]:
    devices = [{"Name": "nvidia/gpu", "Count": gpus}] if gpus else []
    task = {
        "Name": "main",
        "Driver": "docker",
        "Resources": {"CPU": 100, "MemoryMB": 256, "Devices": devices},
    }
    group = {"Name": "group", "Count": count, "Tasks": [task]}
    return {"ID": job_id, "Name": job_id, "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [group]}


@pytest.fixture
def nomad() -> Iterator[NomadSim]:
    with running_nomad_sim(nodes=FLEET, clock=RealClock(), acl=True) as sim:
        sim.register_job(job("gpuhealth-agent", "system"))
        sim.wait_placed("gpuhealth-agent", FLEET, timeout=HANG_GUARD_S)
        sim.register_job(job("llm", "batch", count=4, gpus=8))
        sim.wait_placed("llm", 4, timeout=HANG_GUARD_S)
        yield sim


class World:
    """The region, the aggregator with its Nomad remediator, and the agents of the nodes a test breaks."""

    def __init__(self, nomad: NomadSim, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.nomad = nomad
        self.root = root
        self.agent_token = nomad.create_token("agent", AGENT_POLICY.read_text(encoding="utf-8"))
        remediator_token = nomad.create_token("remediator", REMEDIATOR_POLICY.read_text(encoding="utf-8"))
        self.central = NomadCentralDrains(
            NomadSettings(address=nomad.address),
            NomadDrainSetup(poll_interval_s=0.05),
            environ={"NOMAD_TOKEN": remediator_token},
        )
        self.aggregator = LiveAggregator(
            root / "aggregator.db",
            ManualClock(start=utc_now()),
            TOKEN,
            drain_for=self.central.drain_for,
            budget_min_nodes=2,
            remediator={"name": "remediator-0", "poll_s": 0.05},
        ).start()
        monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
        monkeypatch.setenv("NOMAD_TOKEN", self.agent_token)
        self.agents: dict[str, Agent] = {}
        self.nvml: dict[str, FakeNvml] = {}

    def agent(self, node: str) -> Agent:
        if node not in self.agents:
            settings = AgentSettings(
                orchestrator="nomad",
                nomad={"address": self.nomad.client_address(node), "watch_wait_s": 0.2},
                state_dir=self.root / "agents" / node,
                policy=RemediationPolicy(drain=True, drain_deadline_s=HANG_GUARD_S),
                drain_by="aggregator",
                aggregator={"url": self.aggregator.url, "permit_retry_s": 0.3, "timeout_s": 2},
                http=HttpSettings(enabled=False),
            )
            self.nvml[node] = FakeNvml("h100_sxm", 8, seed=7, node_name=node)
            self.agents[node] = build_agent(settings, library=self.nvml[node], clock=RealClock())
            self.tick(node)
        return self.agents[node]

    def tick(self, node: str) -> TickResult:
        agent = self.agents[node]
        result = agent.tick()
        assert agent.parts.link is not None
        agent.parts.link.deliver()
        return result

    def break_node(self, node: str) -> TickResult:
        agent = self.agent(node)
        feed = agent.parts.feed
        assert feed is not None
        feed.ensure_watching()
        agent.wake.clear()
        assert self.nvml[node].inject_xid(0, 79)
        assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"
        return self.tick(node)

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        self.aggregator.stop()
        self.central.close()


@pytest.fixture
def world(nomad: NomadSim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    made = World(nomad, tmp_path, monkeypatch)
    yield made
    made.close()


def drain_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Drain | Requeue)
    ]


def test_xid_79_the_remediator_drains_the_node_and_restarts_the_batch_job_off_it(
    world: World, nomad: NomadSim
) -> None:
    """The agent (its policy: no alloc-lifecycle) quarantines its node and orders the drain; the remediator
    drains it with IgnoreSystemJobs (the agent's allocation stays), stops all 4 allocations of the batch job
    once (placed again off the node), and records the incident in the node's metadata; the agent reads the
    requeue and the drain back for its timeline."""
    before = {a["ID"] for a in nomad.live_allocations("llm")}
    bad = str(nomad.live_allocations("llm")[0]["NodeName"])
    agents_before = {a["ID"] for a in nomad.live_allocations("gpuhealth-agent") if a["NodeName"] == bad}
    world.agent(bad)

    handled = world.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    [(kind, ok, detail)] = drain_results(handled)
    assert (kind, ok) == ("Drain", True) and detail.startswith("drain ordered from the central remediator")
    assert nomad.state.node(bad)["SchedulingEligibility"] == "ineligible"

    executor = world.agents[bad].parts.executor
    assert isinstance(executor, CentralDrainExecutor)
    assert executor.wait_for_drain(HANG_GUARD_S), "the central drain did not end"
    news = drain_results(world.tick(bad))
    assert [(kind, ok) for kind, ok, _ in news] == [("Requeue", True), ("Drain", True)]
    assert "default/llm: requeued (4 allocations stopped)" in news[0][2]

    def restarted_elsewhere() -> bool:
        now = nomad.live_allocations("llm")
        return (
            len(now) == 4 and not before & {a["ID"] for a in now} and all(a["NodeName"] != bad for a in now)
        )

    wait_until(restarted_elsewhere, message="four new allocations of the training job off the bad node")
    assert {
        a["ID"] for a in nomad.live_allocations("gpuhealth-agent") if a["NodeName"] == bad
    } == agents_before
    node = nomad.state.node(bad)
    assert node["Meta"]["gpuhealth.drained"] == incident.id
    assert node["Meta"]["gpuhealth.requeued"] == incident.id
    assert drain_results(world.tick(bad)) == []


def test_the_agents_token_may_not_stop_any_allocation(world: World, nomad: NomadSim) -> None:
    """The shipped agent policy has no alloc-lifecycle: stopping an allocation of the training job with
    the agent's token is refused (403); the job keeps running."""
    allocation = nomad.live_allocations("llm")[0]
    api = NomadApi(NomadSettings(address=nomad.address), world.agent_token)
    try:
        with pytest.raises(NomadForbidden):
            api.stop_allocation(str(allocation["ID"]))
    finally:
        api.close()
    assert allocation["ID"] in {a["ID"] for a in nomad.live_allocations("llm")}


def test_with_the_aggregator_down_the_agent_still_quarantines_its_node(world: World, nomad: NomadSim) -> None:
    """No aggregator: the agent still writes its node's metadata and makes it ineligible with its own
    token; no drain is ordered (no permit) and the job keeps its allocations."""
    bad = str(nomad.live_allocations("llm")[0]["NodeName"])
    before = {a["ID"] for a in nomad.live_allocations("llm")}
    world.agent(bad)
    world.aggregator.stop()

    agent = world.agents[bad]
    feed = agent.parts.feed
    assert feed is not None
    feed.ensure_watching()
    agent.wake.clear()
    assert world.nvml[bad].inject_xid(0, 79)
    assert agent.wake.wait(HANG_GUARD_S), "the XID did not wake the loop"
    handled = agent.tick()

    assert drain_results(handled) == []
    assert any("no permit for drain" in note for note in handled.notes)
    wait_until(
        lambda: nomad.state.node(bad)["SchedulingEligibility"] == "ineligible",
        message="the node made ineligible by its agent",
    )
    assert nomad.state.node(bad)["Meta"]["gpuhealth.state"] == "unhealthy"
    assert {a["ID"] for a in nomad.live_allocations("llm")} == before
