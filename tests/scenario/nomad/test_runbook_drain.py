"""Runbook on Nomad: drain and requeue by the agent, behind a permit, on a 16-node emulated fleet.

The scheduler runs on real time (as in ``tests/scenario/kube/test_runbook_drain.py``): drains complete and
stopped allocations are placed again on their own thread. Agents are the real ones (``build_agent``: fake
NVML, the Nomad executor with drain on, a live aggregator granting permits), started only on the nodes a
test breaks; each test drives their loop one pass at a time with ``tick()``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from fleet_rig import FleetRig, agent_settings
from live_aggregator import LiveAggregator
from waiting import HANG_GUARD_S, wait_until

from agent.loop import TickResult
from agent.settings import AgentSettings
from agent.state.machine import DebounceConfig
from core.clock import ManualClock, RealClock, utc_now
from core.steps import Drain, Requeue
from remediation.nomad.executor import NomadExecutor
from remediation.plan.planner import RemediationPolicy
from sim.nomad.harness import NomadSim, running_nomad_sim

TOKEN = "drain-scenario-token-0123456789abcdef0123456789"
FLEET = 16
PERMIT_RETRY_S = 0.3


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
    """16 GPU nodes, the scheduler, a 4-node batch training job (8 GPUs each) and the agent's system job."""
    with running_nomad_sim(nodes=FLEET, clock=RealClock()) as sim:
        sim.register_job(job("gpuhealth-agent", "system"))
        sim.wait_placed("gpuhealth-agent", FLEET, timeout=HANG_GUARD_S)
        sim.register_job(job("llm", "batch", count=4, gpus=8))
        sim.wait_placed("llm", 4, timeout=HANG_GUARD_S)
        yield sim


@pytest.fixture
def aggregator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveAggregator]:
    """A live aggregator whose budget lets two nodes be remediated at once."""
    live = LiveAggregator(tmp_path / "aggregator.db", ManualClock(start=utc_now()), TOKEN, budget_min_nodes=2)
    live.start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


class Fleet(FleetRig):
    """The agents started on the fleet's nodes (each finds its node through the local client agent)."""

    def __init__(self, nomad: NomadSim, aggregator: LiveAggregator, state_root: Path) -> None:
        super().__init__(aggregator, state_root, settings=self.node_settings)
        self.nomad = nomad
        self.debounce = DebounceConfig()
        self.policy = RemediationPolicy(drain=True, drain_deadline_s=HANG_GUARD_S)

    def node_settings(self, node: str, state_dir: Path) -> AgentSettings:
        return agent_settings(
            node,
            state_dir,
            self.aggregator,
            orchestrator="nomad",
            nomad={"address": self.nomad.client_address(node), "watch_wait_s": 0.2},
            policy=self.policy,
            drain_by="agent",
            debounce=self.debounce,
            link={"permit_retry_s": PERMIT_RETRY_S},
        )

    def executor(self, node: str) -> NomadExecutor:
        # the recovery wrapper hands the Nomad executor's extras through
        return cast(NomadExecutor, self.agents[node].parts.executor)

    def eligible(self, node: str) -> bool:
        return bool(self.nomad.state.node(node)["SchedulingEligibility"] == "eligible")


@pytest.fixture
def fleet(nomad: NomadSim, aggregator: LiveAggregator, tmp_path: Path) -> Iterator[Fleet]:
    agents = Fleet(nomad, aggregator, tmp_path / "agents")
    yield agents
    agents.close()


def drain_results(result: TickResult) -> list[tuple[str, bool, str]]:
    return [
        (type(r.step).__name__, r.ok, r.detail)
        for r in result.report.results
        if isinstance(r.step, Drain | Requeue)
    ]


def live(nomad: NomadSim, job_id: str) -> list[dict[str, Any]]:
    return nomad.live_allocations(job_id)


def ids(allocations: list[dict[str, Any]]) -> set[str]:
    return {alloc["ID"] for alloc in allocations}


def test_xid_79_on_a_training_node_drains_it_and_restarts_the_batch_job_once_off_the_node(
    fleet: Fleet, nomad: NomadSim
) -> None:
    """XID 79 on a node of a 4-node batch training job: permit granted, node ineligible, drain with the
    agent's system allocation left running, every allocation of the job stopped once and placed again on
    healthy nodes, the incident recorded on the node, drain and requeue in the aggregator's timeline."""
    before = ids(live(nomad, "llm"))
    bad = str(live(nomad, "llm")[0]["NodeName"])
    agents_before = {a["ID"] for a in live(nomad, "gpuhealth-agent") if a["NodeName"] == bad}
    fleet.agent(bad)

    handled = fleet.break_node(bad)
    incident = handled.health.incident
    assert incident is not None
    assert drain_results(handled) == [("Drain", True, "drain started")]
    reported = fleet.finish_drain(bad)

    news = drain_results(reported)
    assert [(kind, ok) for kind, ok, _ in news] == [("Requeue", True), ("Drain", True)]
    assert "default/llm: requeued (4 allocations stopped)" in news[0][2]

    def restarted_elsewhere() -> bool:
        now = live(nomad, "llm")
        return len(now) == 4 and not before & ids(now) and all(a["NodeName"] != bad for a in now)

    wait_until(restarted_elsewhere, message="four new allocations of the training job off the bad node")
    assert {a["ID"] for a in live(nomad, "gpuhealth-agent") if a["NodeName"] == bad} == agents_before
    assert not fleet.eligible(bad)
    node = nomad.state.node(bad)
    assert node["Meta"]["gpuhealth.requeued"] == incident.id
    assert node["LastDrain"]["Meta"]["gpuhealth.incident"] == incident.id
    timeline = fleet.timeline(bad)
    assert ("drain", "ok", "drain ok: drain started") in timeline
    with fleet.aggregator.client() as oncall:
        assert oncall.node(bad).orchestrator == "nomad"
    assert any(
        action == "requeue" and "requeued (4 allocations stopped)" in message
        for action, _, message in timeline
    )

    assert drain_results(fleet.tick(bad)) == []  # never drained twice for the same incident


def test_a_restarted_agent_does_not_drain_or_requeue_the_same_incident_again(
    fleet: Fleet, nomad: NomadSim
) -> None:
    """The drain is recorded on the node and in the state file: after a restart mid-incident no second
    drain is planned and the restarted training job is left alone."""
    bad = str(live(nomad, "llm")[0]["NodeName"])
    fleet.agent(bad)
    incident = fleet.break_node(bad).health.incident
    fleet.finish_drain(bad)
    wait_until(lambda: len(live(nomad, "llm")) == 4, message="the training job placed again")
    restarted = ids(live(nomad, "llm"))

    fleet.restart(bad)
    later = [fleet.tick(bad) for _ in range(2)]

    assert incident is not None and all(r.health.incident == incident for r in later)
    assert all(drain_results(result) == [] for result in later)
    assert ids(live(nomad, "llm")) == restarted
    assert not fleet.eligible(bad)


def test_when_the_incident_closes_the_permit_is_released_and_the_node_eligible_again(
    fleet: Fleet, nomad: NomadSim
) -> None:
    """After the drain, clean readings close the incident: eligibility and metadata restored, the drain
    permit handed back."""
    fleet.debounce = DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=1)
    bad = str(live(nomad, "llm")[0]["NodeName"])
    gate = fleet.agent(bad).parts.permits
    assert gate is not None
    fleet.break_node(bad)
    assert gate.held is not None
    fleet.finish_drain(bad)

    closed = fleet.tick(bad)

    assert closed.health.incident is None
    assert gate.held is None
    assert fleet.eligible(bad)
    meta = nomad.state.node(bad)["Meta"]
    assert not {"gpuhealth.incident", "gpuhealth.drained", "gpuhealth.ineligible_by"} & set(meta)


def test_no_permit_keeps_the_node_ineligible_stops_nothing_and_asks_again_later(
    fleet: Fleet, nomad: NomadSim, aggregator: LiveAggregator
) -> None:
    """Aggregator unreachable when XID 79 strikes: the node is made ineligible but not drained and no
    allocation stops; once it is back, the next pass after the retry interval drains."""
    before = ids(live(nomad, "llm"))
    bad = str(live(nomad, "llm")[0]["NodeName"])
    fleet.agent(bad)
    aggregator.stop()

    handled = fleet.break_node(bad)

    assert drain_results(handled) == []
    assert not fleet.eligible(bad) and nomad.state.node(bad)["DrainStrategy"] is None
    time.sleep(0.2)
    assert ids(live(nomad, "llm")) == before

    aggregator.start()
    time.sleep(PERMIT_RETRY_S)
    assert drain_results(fleet.tick(bad)) == [("Drain", True, "drain started")]
    assert fleet.executor(bad).wait_for_drain(HANG_GUARD_S)


def test_with_taint_off_the_drains_ineligibility_is_lifted_when_the_incident_closes(
    fleet: Fleet, nomad: NomadSim
) -> None:
    """``policy.taint`` off, drain on: the drain alone made the node ineligible (ownership recorded); when
    clean readings close the incident the node is eligible again and our markers are gone."""
    fleet.debounce = DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=1)
    fleet.policy = RemediationPolicy(taint=False, drain=True, drain_deadline_s=HANG_GUARD_S)
    bad = str(live(nomad, "llm")[0]["NodeName"])
    fleet.agent(bad)
    assert drain_results(fleet.break_node(bad)) == [("Drain", True, "drain started")]
    assert fleet.executor(bad).wait_for_drain(HANG_GUARD_S), "the drain did not end"
    meta = nomad.state.node(bad)["Meta"]
    assert not fleet.eligible(bad) and "gpuhealth.quarantine" not in meta
    assert meta["gpuhealth.ineligible_by"] == "gpuhealth"

    closed = fleet.tick(bad)  # the XID was a single event: this clean pass closes the incident

    assert closed.health.incident is None
    assert fleet.eligible(bad)
    meta = nomad.state.node(bad)["Meta"]
    assert not {"gpuhealth.incident", "gpuhealth.drained", "gpuhealth.ineligible_by"} & set(meta)


def test_with_taint_off_a_humans_ineligibility_stays_when_the_incident_closes(
    fleet: Fleet, nomad: NomadSim
) -> None:
    """The node was ineligible by a human's hand before the fault: our drain claims nothing, and closing the
    incident leaves the node ineligible."""
    fleet.debounce = DebounceConfig(min_dwell_s=0.0, clean_readings_to_recover=1)
    fleet.policy = RemediationPolicy(taint=False, drain=True, drain_deadline_s=HANG_GUARD_S)
    bad = str(live(nomad, "llm")[0]["NodeName"])
    nomad.client().node.eligible_node(nomad.node_id(bad), ineligible=True)
    fleet.agent(bad)
    assert drain_results(fleet.break_node(bad)) == [("Drain", True, "drain started")]
    assert fleet.executor(bad).wait_for_drain(HANG_GUARD_S), "the drain did not end"
    assert "gpuhealth.ineligible_by" not in nomad.state.node(bad)["Meta"]

    closed = fleet.tick(bad)

    assert closed.health.incident is None
    assert not fleet.eligible(bad)


@pytest.fixture
def pair_fleet(aggregator: LiveAggregator, tmp_path: Path) -> Iterator[tuple[NomadSim, Fleet]]:
    """Six GPU nodes: three filled by another job, a 2-node batch job ``pair`` on the next two, one free.
    A restart of ``pair`` can then only land on the free node and on the node of its own second rank."""
    with running_nomad_sim(nodes=6, clock=RealClock()) as sim:
        sim.register_job(job("gpuhealth-agent", "system"))
        sim.wait_placed("gpuhealth-agent", 6, timeout=HANG_GUARD_S)
        sim.register_job(job("filler", "batch", count=3, gpus=8))
        sim.wait_placed("filler", 3, timeout=HANG_GUARD_S)
        sim.register_job(job("pair", "batch", count=2, gpus=8))
        sim.wait_placed("pair", 2, timeout=HANG_GUARD_S)
        agents = Fleet(sim, aggregator, tmp_path / "agents")
        yield sim, agents
        agents.close()


def test_two_nodes_of_one_batch_job_failing_a_second_apart_restart_it_once(
    pair_fleet: tuple[NomadSim, Fleet],
) -> None:
    """XID 79 on both nodes of ``pair``, a second apart. The first node's agent restarts the job: both
    allocations stopped, placed again; one replacement lands on the second node, still eligible then. The
    second node's agent finds the job restarted within the same-fault window: it moves only that
    replacement off its node and leaves the job's other, healthy rank running (the job restarts once)."""
    nomad, fleet = pair_fleet
    first, second = sorted(str(alloc["NodeName"]) for alloc in live(nomad, "pair"))
    originals = ids(live(nomad, "pair"))
    fleet.agent(first)
    fleet.agent(second)

    assert drain_results(fleet.break_node(first)) == [("Drain", True, "drain started")]
    wait_until(
        lambda: len(live(nomad, "pair")) == 2 and not originals & ids(live(nomad, "pair")), message="restart"
    )
    restarted = {str(alloc["NodeName"]): str(alloc["ID"]) for alloc in live(nomad, "pair")}
    assert second in restarted, "the restart was expected to place a rank on the second node"
    (healthy_rank,) = {alloc_id for name, alloc_id in restarted.items() if name != second}
    time.sleep(1.0)

    assert drain_results(fleet.break_node(second)) == [("Drain", True, "drain started")]
    news = drain_results(fleet.finish_drain(second))

    requeue = [detail for kind, _, detail in news if kind == "Requeue"]
    assert len(requeue) == 1 and "default/pair: already restarted" in requeue[0], news
    assert "1 allocations moved off this node" in requeue[0]
    assert healthy_rank in ids(live(nomad, "pair")), "the job's healthy rank was stopped a second time"
    stopped = [a for a in nomad.state.allocations(job_id="pair") if a["DesiredStatus"] == "stop"]
    assert ids(stopped) == originals | {restarted[second]}
