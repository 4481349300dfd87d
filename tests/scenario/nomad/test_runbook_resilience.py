"""Runbook on Nomad: outages, a token without node:write, restarts and dry runs while a GPU is broken."""

from __future__ import annotations

from scenario_rig import NomadGpuNode

from agent.loop import TickResult
from core.steps import EmitEvent, StepResult


def nomad_results(result: TickResult) -> list[StepResult]:
    """The results of the steps that need Nomad (an Event is only a log line there)."""
    return [r for r in result.report.results if not isinstance(r.step, EmitEvent)]


def test_a_nomad_outage_during_a_fault_is_survived_and_the_node_quarantined_when_it_returns(
    gpu_node: NomadGpuNode,
) -> None:
    """Nomad answers 503 for five minutes as XID 79 strikes: the pass fails (retried, logged), the agent
    keeps running, and the first pass after the outage sets the metadata and the ineligibility."""
    gpu_node.tick()
    gpu_node.sim.outage(300)
    gpu_node.xid(79)

    during = gpu_node.tick()

    assert during.report.results and not any(result.ok for result in nomad_results(during))
    assert gpu_node.eligible()
    gpu_node.clock.advance(300)
    gpu_node.tick()
    assert not gpu_node.eligible()
    assert gpu_node.state() == "unhealthy"


def test_refused_connections_are_survived_too(gpu_node: NomadGpuNode) -> None:
    """The Nomad agent's port refuses connections for five minutes: same outcome as a 503."""
    gpu_node.tick()
    gpu_node.sim.outage(300, refuse_connections=True)
    gpu_node.xid(79)

    during = gpu_node.tick()

    assert not any(result.ok for result in nomad_results(during))
    gpu_node.clock.advance(300)
    gpu_node.tick()
    assert not gpu_node.eligible()


def test_a_restarted_agent_keeps_the_incident_and_writes_nothing(gpu_node: NomadGpuNode) -> None:
    """Agent restarted mid-incident: the same incident from the state file, the node already as it should
    be, no write."""
    gpu_node.tick()
    gpu_node.xid(79)
    before = gpu_node.tick().health.incident
    assert before is not None

    gpu_node.restart_agent()
    after = gpu_node.ticks(3)[-1].health.incident

    assert after is not None and after.id == before.id
    assert gpu_node.executor.writes_total == 0
    assert gpu_node.meta()["gpuhealth.incident"] == before.id


def test_dry_run_plans_everything_and_leaves_the_node_untouched(gpu_node: NomadGpuNode) -> None:
    """--dry-run: XID 79 is judged and every step planned and reported; the node and the state file stay."""
    gpu_node.dry_run = True
    index = gpu_node.index()
    gpu_node.tick()
    gpu_node.xid(79)

    result = gpu_node.tick()

    assert {type(step).__name__ for step in result.steps} >= {"SetTaint", "SetStateLabel", "SetUnhealthyGpus"}
    assert gpu_node.index() == index
    assert gpu_node.writes() == 0
    assert not (gpu_node.state_dir / "state.json").exists()
