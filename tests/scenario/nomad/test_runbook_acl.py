"""Runbook on Nomad with ACLs on: the agent's token decides what it may do, and a wrong one must not hurt."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from scenario_rig import NomadGpuNode
from structlog.testing import capture_logs

from core.clock import ManualClock
from core.findings import Status
from sim.nomad.harness import NomadSim, running_nomad_sim

AGENT_RULES = """
agent { policy = "read" }
node { policy = "write" }
namespace "*" { capabilities = ["read-job", "alloc-lifecycle"] }
"""
READ_ONLY_RULES = """
agent { policy = "read" }
node { policy = "read" }
namespace "*" { capabilities = ["read-job"] }
"""


@pytest.fixture
def sim(clock: ManualClock) -> Iterator[NomadSim]:
    """Two GPU nodes with ACLs on (the rig's gpu_node uses this one)."""
    with running_nomad_sim(nodes=2, clock=clock, controllers=False, acl=True) as nomad:
        yield nomad


def test_the_documented_agent_policy_is_enough_to_quarantine(gpu_node: NomadGpuNode, sim: NomadSim) -> None:
    """agent read, node write, read-job and alloc-lifecycle: XID 79 makes the node ineligible."""
    gpu_node.token = sim.create_token("agent", AGENT_RULES)
    gpu_node.tick()
    gpu_node.xid(79)

    gpu_node.tick()

    assert not gpu_node.eligible() and gpu_node.state() == "unhealthy"


def test_a_token_without_node_write_is_one_clear_error_and_an_unknown_report_not_a_crash_loop(
    gpu_node: NomadGpuNode, sim: NomadSim
) -> None:
    """The agent's token may read but not write nodes: one error line naming node:write, the verdict
    carries an unknown EXECUTOR_FORBIDDEN finding (the aggregator sees the node as blind), the node is
    reported unknown after the usual blind readings, every pass completes, and writes are not retried
    pass after pass."""
    gpu_node.token = sim.create_token("reader", READ_ONLY_RULES)

    with capture_logs() as logs:
        first = gpu_node.tick()
        later = gpu_node.ticks(10)

    assert not any(result.ok for result in first.report.results)
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert [entry["event"] for entry in errors] == ["nomad_forbidden"]
    assert "node:write" in errors[0]["problem"]
    assert later[0].verdict.status is Status.UNKNOWN
    assert any(f.code == "EXECUTOR_FORBIDDEN" for f in later[0].verdict.findings)
    assert later[-1].health.state.value == "unknown"
    assert gpu_node.agent.tick_errors == 0
    assert gpu_node.writes() == 1  # the refused write; the hold keeps the others from being sent
    assert gpu_node.state() is None and gpu_node.eligible()
