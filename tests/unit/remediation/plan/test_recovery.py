"""The recovery rules of the plan: after the drain ended, one permitted reset or reboot attempt at a time,
then validation; attempts counted from results (a withheld step is planned again), escalation when they run
out or validation fails, nothing for replace, testing or a human's override."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.findings import Action
from core.health import Incident, NodeHealth, NodeState
from core.recovery_record import RecoveryPhase, RecoveryRecord
from core.steps import (
    Drain,
    NodeFacts,
    Reboot,
    RequestPermit,
    Reset,
    SetTaint,
    Step,
    StepResult,
    Validate,
)
from remediation.plan.planner import RemediationMemory, RemediationPolicy, plan
from remediation.plan.recovery import RecoveryRules, record_results

STARTED = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
INCIDENT = "inc-gpu-node-0-20261202T140000Z-ab12"
GPU = "GPU-5c1f8d6e-0f8a-4c1e-9a55-3b7f2c9d0a11"
DRAINING = RemediationPolicy(drain=True, drain_deadline_s=600.0)
RULES = RecoveryRules(max_attempts=2, reboot=True, clean_readings=3)
DRAINED = NodeFacts(drained_incident=INCIDENT, drain_finished_incident=INCIDENT, boot_id="boot-1")
DRAIN_DONE = RemediationMemory(drained=(INCIDENT,), active_incident=INCIDENT)


def health(action: Action = Action.RESET_GPU, state: NodeState = NodeState.UNHEALTHY) -> NodeHealth:
    incident = Incident(
        id=INCIDENT, started_at=STARTED, reasons=["ROW_REMAP_PENDING"], gpus=[GPU], action=action
    )
    return NodeHealth(
        node="gpu-node-0", state=state, since=STARTED, incident=incident, reason="R", message="m"
    )


def recovery_steps(steps: list[Step]) -> list[Step]:
    """The recovery steps with the permits that guard them (drain permits excluded)."""
    return [
        step
        for step in steps
        if isinstance(step, Reset | Reboot | Validate)
        or (isinstance(step, RequestPermit) and step.purpose != "drain")
    ]


def planned(
    node: NodeHealth,
    facts: NodeFacts = DRAINED,
    memory: RemediationMemory = DRAIN_DONE,
    rules: RecoveryRules | None = RULES,
) -> list[Step]:
    return recovery_steps(plan(node, facts, DRAINING, memory, recovery=rules).steps)


def at(phase: RecoveryPhase, **fields: object) -> RemediationMemory:
    record = RecoveryRecord(incident_id=INCIDENT, phase=phase, **fields)
    return DRAIN_DONE.model_copy(update={"recovery": record})


@pytest.mark.parametrize("action", [Action.RESET_GPU, Action.DRAIN_AND_RESET])
def test_reset_is_planned_behind_its_permit_once_the_drain_ended(action: Action) -> None:
    """A reset incident whose drain ended: RequestPermit("reset") then Reset of the incident's GPUs, attempt 1,
    planned last; the record of the incident starts ``ready`` with no attempt counted yet."""
    result = plan(health(action), DRAINED, DRAINING, DRAIN_DONE, recovery=RULES)

    assert result.steps[-2:] == [
        RequestPermit(purpose="reset", incident_id=INCIDENT),
        Reset(INCIDENT, gpus=(GPU,), attempt=1),
    ]
    assert result.memory.recovery == RecoveryRecord(incident_id=INCIDENT)


def test_reboot_is_planned_with_the_boot_id_it_will_be_compared_with() -> None:
    """XID 79 (reboot) after the drain: RequestPermit("reboot") then Reboot carrying this boot's id."""
    assert planned(health(Action.REBOOT)) == [
        RequestPermit(purpose="reboot", incident_id=INCIDENT),
        Reboot(INCIDENT, boot_id="boot-1", attempt=1),
    ]


def test_recovery_is_off_without_rules() -> None:
    """Recovery off (no rules): a drained node gets no reset, and the memory keeps no record."""
    result = plan(health(), DRAINED, DRAINING, DRAIN_DONE)

    assert recovery_steps(result.steps) == [] and result.memory.recovery is None


def test_nothing_is_reset_while_the_drain_runs_or_before_it() -> None:
    """The drain started but has not ended (or never started): no recovery step, no record."""
    running = NodeFacts(drained_incident=INCIDENT, boot_id="boot-1")

    assert planned(health(), facts=running) == []
    assert planned(health(), facts=NodeFacts(boot_id="boot-1"), memory=RemediationMemory()) == []


def test_the_drain_and_the_reset_are_never_planned_in_one_pass() -> None:
    """The first pass of an incident plans its drain only; the reset waits for the drain to end."""
    steps = plan(health(), NodeFacts(boot_id="b"), DRAINING, RemediationMemory(), recovery=RULES).steps

    assert any(isinstance(step, Drain) for step in steps)
    assert recovery_steps(steps) == []


@pytest.mark.parametrize(
    ("action", "state"),
    [
        (Action.REPLACE, NodeState.QUARANTINED),
        (Action.RESET_GPU, NodeState.TESTING),
        (Action.RESET_GPU, NodeState.QUARANTINED),
        (Action.RESTART_APP, NodeState.DEGRADED),
    ],
)
def test_no_recovery_for_replace_testing_quarantine_or_in_service_faults(
    action: Action, state: NodeState
) -> None:
    """replace waits for a human, a testing node is being validated, a quarantined node is held by a
    human, and an application fault never takes the node out of service."""
    assert planned(health(action, state)) == []


def test_a_human_release_stops_the_recovery() -> None:
    """A human released the node during the incident: nothing is reset on our own."""
    memory = DRAIN_DONE.model_copy(update={"human_released": (INCIDENT,)})

    assert planned(health(), memory=memory) == []


def test_an_unreadable_boot_id_means_no_reboot_request() -> None:
    """Without a boot id the node's return could not be recognised: no reboot is requested, a note says why."""
    facts = NodeFacts(drained_incident=INCIDENT, drain_finished_incident=INCIDENT, boot_id=None)
    result = plan(health(Action.REBOOT), facts, DRAINING, DRAIN_DONE, recovery=RULES)

    assert recovery_steps(result.steps) == []
    assert any("boot id is unreadable" in note for note in result.notes)


def test_reboots_off_leave_a_reboot_incident_to_a_human() -> None:
    """recovery.reboot.mode off: a reboot incident gets no request; a reset incident still gets its reset."""
    off = RecoveryRules(max_attempts=2, reboot=False)

    assert planned(health(Action.REBOOT), rules=off) == []
    assert Reset(INCIDENT, (GPU,), 1) in planned(health(Action.RESET_GPU), rules=off)


def test_after_an_agent_restart_the_record_stands_in_for_the_drain_state() -> None:
    """After a restart the executor knows of no drain; the remembered record still lets the next attempt go."""
    memory = at(RecoveryPhase.READY, attempts=1)

    assert planned(health(), facts=NodeFacts(boot_id="boot-1"), memory=memory) == [
        RequestPermit(purpose="reset", incident_id=INCIDENT),
        Reset(INCIDENT, (GPU,), attempt=2),
    ]


def test_rebooting_waits_for_another_boot_id_then_validates() -> None:
    """After the reboot request: nothing while the boot id is the old one; a new one means the node came
    back, and Validate(after="reboot") is planned (no permit: it takes nothing away)."""
    memory = at(RecoveryPhase.REBOOTING, attempts=1, boot_id="boot-1")
    back = NodeFacts(boot_id="boot-2")

    assert planned(health(Action.REBOOT), facts=NodeFacts(boot_id="boot-1"), memory=memory) == []
    assert planned(health(Action.REBOOT), facts=back, memory=memory) == [Validate(INCIDENT, after="reboot")]


def test_validation_is_planned_after_a_reset_and_nothing_while_testing_or_failed() -> None:
    assert planned(health(), memory=at(RecoveryPhase.VALIDATING, attempts=1)) == [
        Validate(INCIDENT, after="reset")
    ]
    assert planned(health(), memory=at(RecoveryPhase.TESTING, attempts=1)) == []
    assert planned(health(), memory=at(RecoveryPhase.FAILED, attempts=2)) == []


def test_a_record_of_an_earlier_incident_is_replaced_by_the_new_one() -> None:
    """The memory holds a failed recovery of another incident: the new incident starts its own record."""
    old = RemediationMemory(
        drained=(INCIDENT,), recovery=RecoveryRecord(incident_id="inc-old", phase=RecoveryPhase.FAILED)
    )
    result = plan(health(), DRAINED, DRAINING, old, recovery=RULES)

    assert Reset(INCIDENT, (GPU,), 1) in result.steps
    assert result.memory.recovery == RecoveryRecord(incident_id=INCIDENT)


def test_mark_and_taint_still_come_first() -> None:
    """Recovery steps are planned last: the taint of a fresh node precedes them."""
    steps = plan(health(), DRAINED, DRAINING, DRAIN_DONE, recovery=RULES).steps

    assert isinstance(steps[0], SetTaint) and isinstance(steps[-1], Reset)


# --- results -> record ------------------------------------------------------------------------------------


def result(step: Step, ok: bool, detail: str = "") -> StepResult:
    return StepResult(step=step, ok=ok, detail=detail)


READY = RecoveryRecord(incident_id=INCIDENT)


def test_a_successful_reset_moves_to_validation_and_counts_the_attempt() -> None:
    record = record_results(READY, [result(Reset(INCIDENT, (GPU,), 1), True, "GPU 0 reset")], RULES)

    assert record == RecoveryRecord(
        incident_id=INCIDENT, phase=RecoveryPhase.VALIDATING, attempts=1, detail="GPU 0 reset"
    )


def test_a_failed_attempt_is_retried_until_max_attempts_then_fails() -> None:
    """A failed reset leaves the record ready for attempt 2; the failure of the last attempt allowed makes
    it failed, with a detail naming the attempts (the incident then escalates)."""
    first = record_results(READY, [result(Reset(INCIDENT, (GPU,), 1), False, "exit 3")], RULES)
    assert first is not None and (first.phase, first.attempts) == (RecoveryPhase.READY, 1)

    second = record_results(first, [result(Reset(INCIDENT, (GPU,), 2), False, "exit 3")], RULES)
    assert second is not None and second.phase is RecoveryPhase.FAILED
    assert second.detail == "recovery failed after 2 attempt(s): exit 3"


def test_a_withheld_step_leaves_the_record_unchanged() -> None:
    """No permit: the step is absent from the results, the attempt is not counted, the plan asks again."""
    assert record_results(READY, [], RULES) == READY


def test_a_requested_reboot_remembers_the_boot_id_it_left() -> None:
    record = record_results(READY, [result(Reboot(INCIDENT, "boot-1", 1), True, "sentinel")], RULES)

    assert record is not None
    assert (record.phase, record.boot_id, record.attempts) == (RecoveryPhase.REBOOTING, "boot-1", 1)


def test_validation_passes_to_testing_or_fails() -> None:
    validating = READY.model_copy(update={"phase": RecoveryPhase.VALIDATING, "attempts": 1})

    passed = record_results(validating, [result(Validate(INCIDENT, "reset"), True, "ok")], RULES)
    failed = record_results(validating, [result(Validate(INCIDENT, "reset"), False, "diag: memory")], RULES)

    assert passed is not None and passed.phase is RecoveryPhase.TESTING
    assert failed is not None and failed.phase is RecoveryPhase.FAILED
    assert failed.detail == "validation failed: diag: memory"


def test_results_of_another_incident_are_ignored() -> None:
    other = result(Reset("inc-other", (GPU,), 1), False, "x")

    assert record_results(READY, [other], RULES) == READY
