"""The read-back after a lost state file (agent/state/resume.py): which evidence means an incident is still
open, what incident continues (id, start, action, reasons, by hand or not), and that the state machine then
keeps the node out of service until the normal path ends the incident."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
from waiting import HANG_GUARD_S, wait_until

from agent.state.machine import MANUAL_QUARANTINE, DebounceConfig, HealthStateMachine
from agent.state.resume import STATE_RESTORED, AggregatorRecord, LostState, resumed_state
from core.aggregator_api import IncidentSummary, Permit
from core.findings import Action, Finding, Status, Verdict
from core.health import NodeState
from core.steps import NodeFacts

NODE = "gpu-node-3"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
INCIDENT = "inc-gpu-node-3-20260501T110000Z-3f2a"


def marked(**changes: object) -> NodeFacts:
    """The node as the agent left it during incident INCIDENT: condition, label, taint, annotation."""
    base: dict[str, object] = {
        "condition_status": "False",
        "condition_reason": "XID_79",
        "condition_message": "reboot: XID 79 on GPU 3: fallen off the bus",
        "state_label": "unhealthy",
        "taint_value": "reboot",
        "taint_effect": "NoSchedule",
        "incident_annotation": INCIDENT,
    }
    return NodeFacts(**{**base, **changes})  # type: ignore[arg-type]


def summary(**changes: object) -> IncidentSummary:
    base: dict[str, object] = {
        "id": INCIDENT,
        "node": NODE,
        "started_at": NOW - timedelta(hours=1),
        "ended_at": None,
        "reasons": ["XID_79", "XID_48"],
        "action": Action.REBOOT,
        "open": True,
    }
    return IncidentSummary.model_validate({**base, **changes})


def permit(action: Action, incident: str | None = INCIDENT) -> Permit:
    return Permit(
        id=7,
        node=NODE,
        action=action,
        incident_id=incident,
        granted_at=NOW - timedelta(minutes=30),
        expires_at=NOW + timedelta(minutes=30),
        active=True,
    )


@pytest.mark.parametrize(
    "facts",
    [
        NodeFacts(),
        NodeFacts(state_label="healthy", condition_status="True", condition_reason="AllChecksPassed"),
        NodeFacts(taint_value="testing", taint_effect="NoSchedule", state_label="testing"),  # a diagnostic
        NodeFacts(state_label="degraded"),
    ],
    ids=["fresh-node", "healthy", "diagnostic-taint", "degraded"],
)
def test_no_evidence_of_an_open_incident_starts_fresh(facts: NodeFacts) -> None:
    assert resumed_state(NODE, facts, AggregatorRecord(), NOW) is None
    assert resumed_state(NODE, facts, None, NOW) is None


def test_the_nodes_marks_alone_continue_the_same_incident() -> None:
    """Aggregator unreachable: the annotation gives the id (and its start), the taint the action, the
    condition the code and message, so the node's condition reads as before the restart."""
    resumed = resumed_state(NODE, marked(), None, NOW)
    assert resumed is not None
    incident = resumed.incident
    assert (incident.id, incident.started_at, incident.action) == (
        INCIDENT,
        datetime(2026, 5, 1, 11, 0, tzinfo=UTC),
        Action.REBOOT,
    )
    assert incident.reasons == ["XID_79"]
    assert [(f.code, f.message) for f in incident.findings] == [
        ("XID_79", "XID 79 on GPU 3: fallen off the bus")
    ]
    assert not resumed.manual
    assert resumed.memory.active_incident == INCIDENT
    assert resumed.memory.emitted_events == (f"{INCIDENT}/opened/reboot",)  # announced once, not again
    assert resumed.evidence == ("incident annotation", "taint", "state label")


def test_the_aggregators_record_adds_start_reasons_and_a_higher_action() -> None:
    record = AggregatorRecord(incident=summary(action=Action.REBOOT), permit=permit(Action.REPLACE))
    resumed = resumed_state(NODE, marked(taint_value="reset_gpu"), record, NOW)
    assert resumed is not None
    assert resumed.incident.started_at == NOW - timedelta(hours=1)
    assert resumed.incident.reasons == ["XID_79", "XID_48"]
    assert resumed.incident.action is Action.REPLACE  # never lower than any evidence names


def test_only_the_aggregator_remembers_the_incident() -> None:
    """Our taint and annotation were removed by someone (or never set: taint off), the aggregator still
    has the incident open: it continues."""
    resumed = resumed_state(NODE, NodeFacts(), AggregatorRecord(incident=summary()), NOW)
    assert resumed is not None
    assert (resumed.incident.id, resumed.incident.action) == (INCIDENT, Action.REBOOT)
    assert resumed.evidence == ("aggregator incident",)


def test_a_label_without_an_action_is_held_for_a_human() -> None:
    """Only the label says unhealthy (taint off, aggregator down): which action is unknown, so the node is
    held (replace) rather than released; an id is made up since none is known."""
    resumed = resumed_state(NODE, NodeFacts(state_label="unhealthy"), None, NOW)
    assert resumed is not None
    assert resumed.incident.action is Action.REPLACE
    assert re.fullmatch(f"inc-{NODE}-20260501T120000Z-lost-[0-9a-f]{{16}}", resumed.incident.id)
    again = resumed_state(NODE, NodeFacts(state_label="unhealthy"), None, NOW)
    assert again is not None and again.incident.id != resumed.incident.id  # not to be guessed by another node
    assert resumed.incident.reasons == [STATE_RESTORED]


def test_a_manual_quarantine_stays_manual_with_its_note() -> None:
    facts = marked(
        condition_reason=MANUAL_QUARANTINE,
        condition_message="quarantined by hand: cabling check",
        state_label="quarantined",
        taint_value="replace",
    )
    resumed = resumed_state(NODE, facts, None, NOW)
    assert resumed is not None
    assert resumed.manual and resumed.note == "cabling check"
    assert resumed.incident.action is Action.REPLACE
    assert MANUAL_QUARANTINE in resumed.incident.reasons


def test_an_aggregator_hold_makes_it_manual() -> None:
    resumed = resumed_state(NODE, marked(), AggregatorRecord(hold="repeat offender: 3 incidents in 7 d"), NOW)
    assert resumed is not None
    assert resumed.manual and resumed.note == "repeat offender: 3 incidents in 7 d"


def test_our_cordon_is_remembered_as_ours() -> None:
    resumed = resumed_state(NODE, marked(unschedulable=True, cordoned_by_us=True), None, NOW)
    assert resumed is not None and resumed.memory.cordoned_for == INCIDENT


CLEAN = Verdict.from_findings(
    NODE, [Finding(check="xid", gpu=None, status=Status.OK, code="OK", message="ok", action=Action.NONE)]
)


def machine(clock: list[datetime]) -> HealthStateMachine:
    config = DebounceConfig(clean_readings_to_recover=3, min_dwell_s=300)
    return HealthStateMachine(NODE, config, clock=lambda: clock[0])


def test_a_resumed_incident_closes_only_the_normal_way() -> None:
    """reboot, healthy GPUs: unhealthy through the clean readings, closed once the dwell passed too."""
    clock = [NOW]
    resumed = resumed_state(NODE, marked(), None, NOW)
    assert resumed is not None
    states = machine(clock)
    states.resume(resumed.incident, manual=resumed.manual, note=resumed.note)
    seen = []
    for _ in range(3):
        seen.append(states.observe(CLEAN).state)
    assert seen == [NodeState.UNHEALTHY] * 3  # three clean readings, but not 300 s of them
    clock[0] = NOW + timedelta(seconds=301)
    assert states.observe(CLEAN).state is NodeState.HEALTHY


def test_a_resumed_quarantine_waits_for_a_human() -> None:
    clock = [NOW]
    resumed = resumed_state(NODE, marked(taint_value="replace", state_label="quarantined"), None, NOW)
    assert resumed is not None
    states = machine(clock)
    states.resume(resumed.incident, manual=resumed.manual, note=resumed.note)
    for minutes in range(1, 20):
        clock[0] = NOW + timedelta(minutes=minutes)
        assert states.observe(CLEAN).state is NodeState.QUARANTINED
    assert states.release_by_human("checked").state is NodeState.HEALTHY


def test_an_incident_opened_before_the_node_could_be_read_joins_the_resumed_one() -> None:
    clock = [NOW]
    states = machine(clock)
    xid = Finding(
        check="xid", gpu="GPU-1", status=Status.FAIL, code="XID_48", message="dbe", action=Action.RESET_GPU
    )
    opened = states.observe(Verdict.from_findings(NODE, [xid])).incident
    assert opened is not None and opened.id != INCIDENT
    resumed = resumed_state(NODE, marked(), None, NOW)
    assert resumed is not None
    health = states.resume(resumed.incident, manual=False, note=None)
    assert health.incident is not None
    assert (health.incident.id, health.incident.action) == (INCIDENT, Action.REBOOT)
    assert health.incident.reasons == ["XID_79", "XID_48"] and health.incident.gpus == ["GPU-1"]


def test_the_nodes_marks_decide_at_once_without_waiting_for_the_aggregator() -> None:
    """The aggregator hangs: the read-back still continues the incident the node shows, on the first pass."""
    release = threading.Event()

    def hanging() -> AggregatorRecord | None:
        release.wait(HANG_GUARD_S)
        return AggregatorRecord()

    lost = LostState(NODE, hanging, clock=lambda: NOW)
    try:
        resumed = lost.read_back(marked())
        assert resumed is not None and resumed.incident.id == INCIDENT and lost.finished
    finally:
        release.set()


def test_without_marks_on_the_node_the_aggregators_answer_decides_on_a_later_pass() -> None:
    """No mark on the node and no answer yet: nothing resumed, not finished (no pass waits); once the
    aggregator answered with an open incident, the next pass continues it."""
    release = threading.Event()

    def slow() -> AggregatorRecord | None:
        release.wait(HANG_GUARD_S)
        return AggregatorRecord(incident=summary())

    lost = LostState(NODE, slow, clock=lambda: NOW)
    assert lost.read_back(NodeFacts()) is None and not lost.finished
    release.set()
    assert wait_until(lambda: lost.answered)
    resumed = lost.read_back(NodeFacts())
    assert resumed is not None and resumed.incident.id == INCIDENT and lost.finished


def test_an_aggregator_that_cannot_say_leaves_a_fresh_start() -> None:
    lost = LostState(NODE, lambda: None, clock=lambda: NOW)
    assert wait_until(lambda: lost.answered)
    assert lost.read_back(NodeFacts()) is None and lost.finished
