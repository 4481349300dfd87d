"""What a hostile review of the aggregator got through (issue 27), each over real HTTP against a running
aggregator with per-node identities, as it was reproduced: every attack here is now refused or harmless.
docs/security.md names each test in its threat model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from live_aggregator import LiveAggregator

from agent.uplink.client import AggregatorClient, PermitRefused
from core.aggregator_api import Report
from core.clock import ManualClock
from core.findings import Action
from tests.aggregator.builders import report
from tests.aggregator.identities import (
    AGENT_NODE,
    OTHER_NODE,
    Identities,
    client_as,
    start_with_identities,
)

ATTACKER = AGENT_NODE  # a compromised node: root on it, with its agent's token
VICTIM = OTHER_NODE
AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def identities() -> Identities:
    return Identities()


@pytest.fixture
def live(tmp_path: Path, identities: Identities) -> Iterator[tuple[LiveAggregator, ManualClock]]:
    started = start_with_identities(tmp_path, identities, budget_min_nodes=2)
    yield started
    started[0].stop()


def _send(client: AggregatorClient, node: str, seq: int, state: str = "healthy", **kwargs: Any) -> None:
    assert client.report(Report.model_validate(report(node, seq, state, **kwargs))).accepted


def _forged_action(incident_id: str) -> dict[str, Any]:
    return {
        "at": AT.isoformat(),
        "action": "reboot",
        "result": "ok",
        "message": "forged",
        "incident_id": incident_id,
    }


# -- item 2: a node writes into another node's incident -------------------------------------------------------


def test_an_action_naming_another_nodes_incident_stays_out_of_its_timeline(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with (
        client_as(aggregator, identities.other_agent) as victim,
        client_as(aggregator, identities.agent) as bad,
    ):
        _send(victim, VICTIM, 1, "unhealthy", incident="inc-victim")
        _send(bad, ATTACKER, 1, actions=[_forged_action("inc-victim")])
    with client_as(aggregator, identities.viewer) as viewer:
        timeline = viewer.incident("inc-victim").timeline
        attackers = [event for event in viewer.events(node=ATTACKER) if event.kind == "action"]
    assert [event.node for event in timeline if event.node != VICTIM] == []
    assert [(event.message, event.incident_id) for event in attackers] == [("reboot ok: forged", None)]


def test_a_permit_request_naming_another_nodes_incident_leaves_nothing_there(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with (
        client_as(aggregator, identities.other_agent) as victim,
        client_as(aggregator, identities.agent) as bad,
    ):
        _send(victim, VICTIM, 1, "unhealthy", incident="inc-victim")
        _send(bad, ATTACKER, 1)
        granted = bad.request_permit(ATTACKER, Action.REBOOT, incident_id="inc-victim")
        bad.release_permit(granted.id)
        with pytest.raises(PermitRefused):  # in cooldown now: the refusal is an event too
            bad.request_permit(ATTACKER, Action.REBOOT, incident_id="inc-victim")
    with client_as(aggregator, identities.viewer) as viewer:
        timeline = viewer.incident("inc-victim").timeline
        permit_events = [e for e in viewer.events(node=ATTACKER) if e.kind.startswith("permit_")]
    assert granted.incident_id is None
    assert [event.kind for event in timeline if event.node != VICTIM] == []
    assert {event.kind for event in permit_events} == {"permit_granted", "permit_released", "permit_refused"}
    assert all(event.incident_id is None for event in permit_events)


# -- item 3: incident ids are scoped to their node ------------------------------------------------------------


def test_an_incident_id_taken_first_by_another_node_does_not_hide_the_real_incident(
    live: tuple[LiveAggregator, ManualClock], identities: Identities
) -> None:
    aggregator, _clock = live
    with (
        client_as(aggregator, identities.agent) as bad,
        client_as(aggregator, identities.other_agent) as victim,
    ):
        _send(victim, VICTIM, 1)
        _send(bad, ATTACKER, 1, "unhealthy", incident="inc-victim-next")  # the victim's id, used first
        _send(victim, VICTIM, 2, "unhealthy", incident="inc-victim-next")
        _send(victim, VICTIM, 3, "unhealthy", incident="inc-victim-next")  # the same incident, not a new one
        own = victim.node(VICTIM).incident
        permit = victim.request_permit(VICTIM, Action.REBOOT, incident_id="inc-victim-next")
    assert own is not None and own.node == VICTIM and own.open
    assert own.id.startswith("inc-victim-next~") and len(own.id) <= 128
    assert permit.incident_id == own.id  # the victim's permit is for its own incident
    with client_as(aggregator, identities.viewer) as viewer:
        opened = [e for e in viewer.events(node=VICTIM) if e.kind == "incident_opened"]
        alerts = [a for a in viewer.alerts() if a.kind == "incident_opened" and a.node == VICTIM]
        detail = viewer.incident(own.id)
    assert [event.incident_id for event in opened] == [own.id]
    assert [alert.incident_id for alert in alerts] == [own.id]
    assert detail.node == VICTIM and detail.timeline


def test_agents_make_incident_ids_no_other_node_can_guess() -> None:
    from agent.state.machine import default_incident_id

    ids = {default_incident_id("gpu-node-7", AT) for _ in range(64)}
    assert len(ids) == 64
    assert all(len(one.rsplit("-", 1)[1]) == 16 for one in ids)  # 64 random bits
