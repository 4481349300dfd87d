"""The state machine's side of recovery: ``testing`` after a validated reset, released by M clean readings
without the dwell, a fault while testing fails the validation, and ``recovery_failed`` escalates to
``replace`` (quarantined, never self-closing); plus ``settle_recovery``, which drives both from results."""

from __future__ import annotations

from health_readings import HEALTHY, ROW_REMAP_PENDING, XID_48, Rig

from agent.recovery.settle import settle_recovery
from agent.state.machine import RECOVERY_FAILED, DebounceConfig
from core.findings import Action
from core.health import NodeState
from core.plan_memory import RemediationMemory
from core.recovery_record import RecoveryPhase, RecoveryRecord
from core.steps import ApplyReport, Reset, StepResult, Validate
from remediation.plan.recovery import RecoveryRules

RULES = RecoveryRules(max_attempts=2, clean_readings=2)
LONG_DWELL = DebounceConfig(min_dwell_s=3600.0, clean_readings_to_recover=5)


def opened_rig() -> Rig:
    """A machine with a row-remap incident open (action reset_gpu), dwell far longer than the test."""
    rig = Rig(LONG_DWELL)
    assert rig.feed(ROW_REMAP_PENDING) == ["unhealthy"]
    return rig


def test_testing_node_is_released_after_m_clean_readings_without_the_dwell() -> None:
    """begin_testing(2): state testing at once (incident kept, so the taint stays), then two clean readings
    close the incident although the one-hour dwell and the usual 5 readings are far from reached."""
    rig = opened_rig()

    assert rig.machine.begin_testing(2).state is NodeState.TESTING
    assert rig.feed(HEALTHY, HEALTHY) == ["testing", "healthy"]
    assert rig.machine.health.incident is None


def test_without_testing_the_usual_dwell_still_holds() -> None:
    """The same clean readings without a validated recovery keep the incident open (dwell not reached)."""
    rig = opened_rig()

    assert rig.feed(HEALTHY, HEALTHY, HEALTHY) == ["unhealthy"] * 3


def test_a_fault_while_testing_fails_validation_and_escalates_to_replace() -> None:
    """XID 48 while testing: the incident joins RECOVERY_FAILED with action replace; quarantined, and
    clean readings no longer close it."""
    rig = opened_rig()
    rig.machine.begin_testing(2)

    assert rig.feed(HEALTHY, XID_48) == ["testing", "quarantined"]
    incident = rig.machine.health.incident
    assert incident is not None and incident.action is Action.REPLACE
    assert RECOVERY_FAILED in incident.reasons and rig.machine.health.reason == RECOVERY_FAILED
    assert rig.feed(HEALTHY, HEALTHY, HEALTHY) == ["quarantined"] * 3


def test_recovery_failed_quarantines_with_the_reason_and_keeps_the_incident() -> None:
    rig = opened_rig()
    incident_id = rig.machine.health.incident.id if rig.machine.health.incident else None

    health = rig.machine.recovery_failed("recovery failed after 2 attempt(s): exit 3")

    assert health.state is NodeState.QUARANTINED
    assert health.incident is not None and health.incident.id == incident_id
    assert health.reason == RECOVERY_FAILED and "exit 3" in health.message


def test_testing_survives_a_restart_through_the_saved_counters() -> None:
    """The state file keeps the testing countdown: a restarted machine releases after the same readings."""
    rig = opened_rig()
    rig.machine.begin_testing(2)
    rig.feed(HEALTHY)
    restarted = rig.build(rig.machine.export(RemediationMemory()))
    rig.machine = restarted

    assert rig.machine.health.state is NodeState.TESTING
    assert rig.feed(HEALTHY) == ["healthy"]


def test_begin_testing_without_an_incident_or_for_replace_changes_nothing() -> None:
    rig = Rig(LONG_DWELL)
    rig.feed(HEALTHY)
    assert rig.machine.begin_testing(2).state is NodeState.HEALTHY

    failed = opened_rig()
    failed.machine.recovery_failed("x")
    assert failed.machine.begin_testing(2).state is NodeState.QUARANTINED


def test_a_human_release_ends_testing() -> None:
    rig = opened_rig()
    rig.machine.begin_testing(2)

    assert rig.machine.release_by_human("fixed by hand").state is NodeState.HEALTHY


# --- settle_recovery ----------------------------------------------------------------------------------


def memory_at(incident_id: str, phase: RecoveryPhase, attempts: int = 0) -> RemediationMemory:
    record = RecoveryRecord(incident_id=incident_id, phase=phase, attempts=attempts)
    return RemediationMemory(recovery=record)


def test_settle_starts_testing_when_validation_passes() -> None:
    rig = opened_rig()
    incident = rig.machine.health.incident
    assert incident is not None
    report = ApplyReport([StepResult(Validate(incident.id, "reset"), ok=True, detail="no diagnostic")])

    memory = settle_recovery(memory_at(incident.id, RecoveryPhase.VALIDATING, 1), report, rig.machine, RULES)

    assert memory.recovery is not None and memory.recovery.phase is RecoveryPhase.TESTING
    assert rig.machine.health.state is NodeState.TESTING


def test_settle_escalates_when_the_last_attempt_fails() -> None:
    rig = opened_rig()
    incident = rig.machine.health.incident
    assert incident is not None
    failed = StepResult(Reset(incident.id, (), 2), ok=False, detail="attempt 2: nvidia-smi exited with 3")

    memory = settle_recovery(
        memory_at(incident.id, RecoveryPhase.READY, 1), ApplyReport([failed]), rig.machine, RULES
    )

    assert memory.recovery is not None and memory.recovery.phase is RecoveryPhase.FAILED
    health = rig.machine.health
    assert health.state is NodeState.QUARANTINED
    assert "recovery failed after 2 attempt(s)" in health.message


def test_settle_leaves_everything_when_no_recovery_step_ran() -> None:
    rig = opened_rig()
    incident = rig.machine.health.incident
    assert incident is not None
    memory = memory_at(incident.id, RecoveryPhase.READY)

    assert settle_recovery(memory, ApplyReport(), rig.machine, RULES) is memory
    assert rig.machine.health.state is NodeState.UNHEALTHY
