"""The plan's drain rule: permit then drain, only for an out-of-service incident with ``policy.drain`` on,
never when a human overrode the incident, and never twice for one incident."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.findings import Action
from core.health import Incident, NodeHealth, NodeState
from core.steps import Drain, NodeFacts, RequestPermit, Step
from remediation.plan.planner import RemediationMemory, RemediationPolicy, facts_after, plan

STARTED = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
INCIDENT_ID = "inc-gpu-node-0-20261202T140000Z-ab12"
DRAINING = RemediationPolicy(drain=True, drain_deadline_s=600.0)


def unhealthy(action: Action = Action.REBOOT, state: NodeState = NodeState.UNHEALTHY) -> NodeHealth:
    incident = Incident(id=INCIDENT_ID, started_at=STARTED, reasons=["XID_79"], action=action)
    return NodeHealth(
        node="gpu-node-0", state=state, since=STARTED, incident=incident, reason="XID_79", message="xid 79"
    )


def drain_steps(steps: list[Step]) -> list[Step]:
    return [step for step in steps if isinstance(step, RequestPermit | Drain)]


def test_out_of_service_incident_plans_permit_then_drain_last() -> None:
    """XID 79 (reboot) with drain on: the plan ends with RequestPermit("drain") then Drain, so the permit
    guards only the drain (mark and taint come before it)."""
    result = plan(unhealthy(), NodeFacts(), DRAINING, RemediationMemory())

    assert result.steps[-2:] == [
        RequestPermit(purpose="drain", incident_id=INCIDENT_ID, action=Action.REBOOT),  # not drain_and_reset
        Drain(incident_id=INCIDENT_ID, deadline_s=600.0),
    ]
    assert result.memory.was_drained(INCIDENT_ID)


def test_drain_is_off_by_default() -> None:
    """The default policy marks and taints only: no permit asked, no drain."""
    result = plan(unhealthy(), NodeFacts(), RemediationPolicy(), RemediationMemory())

    assert drain_steps(result.steps) == []


@pytest.mark.parametrize("action", [Action.NONE, Action.RESTART_APP])
def test_incident_that_keeps_the_node_in_service_is_not_drained(action: Action) -> None:
    """An incident whose action does not take the node out of service (restart_app) is not drained."""
    health = unhealthy(action=action, state=NodeState.DEGRADED)

    assert drain_steps(plan(health, NodeFacts(), DRAINING, RemediationMemory()).steps) == []


def test_quarantined_node_is_drained_too() -> None:
    """A node held quarantined with an out-of-service incident is drained like an unhealthy one."""
    health = unhealthy(action=Action.REPLACE, state=NodeState.QUARANTINED)

    assert Drain(INCIDENT_ID, 600.0) in plan(health, NodeFacts(), DRAINING, RemediationMemory()).steps


def test_same_incident_is_never_drained_twice() -> None:
    """Once planned (the memory says so), later passes of the same incident plan no drain, even if the
    drain ended incomplete."""
    first = plan(unhealthy(), NodeFacts(), DRAINING, RemediationMemory())
    facts = facts_after(NodeFacts(), first.steps)
    second = plan(unhealthy(), facts, DRAINING, first.memory)

    assert drain_steps(second.steps) == []


def test_executor_reporting_the_drain_stops_a_second_plan_without_memory() -> None:
    """An agent that lost its memory but whose executor already drains this incident plans no drain."""
    facts = NodeFacts(drained_incident=INCIDENT_ID)

    assert drain_steps(plan(unhealthy(), facts, DRAINING, RemediationMemory()).steps) == []


def test_human_release_means_no_drain() -> None:
    """A human released the node for this incident: nothing is drained."""
    facts = NodeFacts(manual_release=INCIDENT_ID)

    result = plan(unhealthy(), facts, DRAINING, RemediationMemory())

    assert drain_steps(result.steps) == []
    assert any("not draining" in note for note in result.notes)


def test_human_uncordon_means_no_drain() -> None:
    """A human lifted our cordon during this incident: draining would cordon again, so it is not done."""
    facts = NodeFacts(cordoned_by_us=True, unschedulable=False)

    assert drain_steps(plan(unhealthy(), facts, DRAINING, RemediationMemory()).steps) == []


def test_a_new_incident_is_drained_even_after_an_earlier_one() -> None:
    """The once-per-incident memory is per incident id: a later incident is drained again."""
    memory = RemediationMemory(drained=("inc-gpu-node-0-20261201T000000Z-0000",))

    assert Drain(INCIDENT_ID, 600.0) in plan(unhealthy(), NodeFacts(), DRAINING, memory).steps


def test_healthy_node_plans_no_drain() -> None:
    """No incident, no drain."""
    health = NodeHealth(
        node="gpu-node-0", state=NodeState.HEALTHY, since=STARTED, reason="AllChecksPassed", message="ok"
    )

    assert drain_steps(plan(health, NodeFacts(), DRAINING, RemediationMemory()).steps) == []
