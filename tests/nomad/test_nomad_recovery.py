"""Recovery on Nomad: the Nomad executor's facts carry what the recovery rules read, end to end.

An emulated Nomad (real time, its scheduler on), a live aggregator granting permits, and the real agent
(``build_agent``: fake NVML, the Nomad executor with drain on, recovery on) on a node whose reboot is
simulated in process (``SimulatedNodeRecovery``). XID 79: the node is made ineligible and drained; once
Nomad's ``LastDrain`` names the incident the executor reports the drain as finished
(``drain_finished_incident``), the reboot is requested, the new boot id is seen, the node validated, then
eligible again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from live_aggregator import LiveAggregator
from waiting import HANG_GUARD_S, wait_until

from agent.loop import Agent, TickResult
from agent.recovery.settings import RecoverySettings, ValidationSettings
from agent.settings import AgentSettings, HttpSettings
from agent.wiring import build_agent
from core.clock import ManualClock, RealClock, utc_now
from core.findings import Action
from core.health import NodeState
from core.steps import Reboot, Validate
from remediation.plan.planner import RemediationPolicy
from sim.fakes.nvml import FakeNvml
from sim.nomad.harness import NomadSim, running_nomad_sim
from sim.simulated_recovery import SimulatedNodeRecovery

TOKEN = "nomad-recovery-token-0123456789abcdef0123456789"
NODE = "gpu-node-0"


@pytest.fixture
def nomad() -> Iterator[NomadSim]:
    with running_nomad_sim(nodes=2, clock=RealClock()) as sim:
        yield sim


@pytest.fixture
def aggregator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveAggregator]:
    live = LiveAggregator(tmp_path / "aggregator.db", ManualClock(start=utc_now()), TOKEN, budget_min_nodes=2)
    live.start()
    monkeypatch.setenv("GPUHEALTH_AGGREGATOR_TOKEN", TOKEN)
    yield live
    live.stop()


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml("h100_sxm", 8, seed=7, node_name=NODE)


@pytest.fixture
def agent(nomad: NomadSim, aggregator: LiveAggregator, nvml: FakeNvml, tmp_path: Path) -> Iterator[Agent]:
    settings = AgentSettings(
        orchestrator="nomad",
        nomad={"address": nomad.client_address(NODE), "watch_wait_s": 0.2},
        state_dir=tmp_path / "state",
        policy=RemediationPolicy(drain=True, drain_deadline_s=HANG_GUARD_S),
        drain_by="agent",
        recovery=RecoverySettings(enabled=True, validation=ValidationSettings(clean_readings=2)),
        aggregator={"url": aggregator.url, "permit_retry_s": 0.3, "timeout_s": 2},
        http=HttpSettings(enabled=False),
    )
    built = build_agent(
        settings,
        library=nvml,
        clock=RealClock(),
        recovery_actions=SimulatedNodeRecovery(nvml, node=NODE),
    )
    yield built
    built.close()


def tick(agent: Agent) -> TickResult:
    result = agent.tick()
    assert agent.parts.link is not None
    agent.parts.link.deliver()
    return result


def recovery_results(result: TickResult) -> list[tuple[str, bool]]:
    return [
        (type(r.step).__name__, r.ok) for r in result.report.results if isinstance(r.step, Reboot | Validate)
    ]


def test_xid_79_on_nomad_is_drained_rebooted_validated_and_made_eligible_again(
    agent: Agent, nvml: FakeNvml, nomad: NomadSim
) -> None:
    tick(agent)
    nvml.lose_gpu(0)
    incident = tick(agent).health.incident
    assert incident is not None and incident.action is Action.REBOOT
    assert nomad.state.node(NODE)["SchedulingEligibility"] == "ineligible"

    executor = agent.parts.executor
    wait_until(
        lambda: executor.facts().drain_finished_incident == incident.id, message="Nomad to end the drain"
    )
    assert recovery_results(tick(agent)) == [("Reboot", True)]
    assert recovery_results(tick(agent)) == [("Validate", True)]  # another boot id: the node came back

    states = [tick(agent).health.state for _ in range(2)]
    assert states == [NodeState.TESTING, NodeState.HEALTHY]
    assert nomad.state.node(NODE)["SchedulingEligibility"] == "eligible"
