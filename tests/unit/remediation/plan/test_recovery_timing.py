"""The recovery rules' timing: a backoff between attempts (doubling, capped, counted from when the failed
attempt was planned), the deadline of a requested reboot (withdrawn and counted failed), a node that comes
back late, and a validation that runs in the background (nothing planned meanwhile, its outcome collected)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.recovery.settings import RebootSettings, RecoverySettings
from core.findings import Action
from core.health import Incident, NodeHealth, NodeState
from core.recovery_record import RecoveryPhase, RecoveryRecord
from core.steps import (
    NodeFacts,
    Reboot,
    RequestPermit,
    Reset,
    Step,
    StepResult,
    Validate,
    WithdrawReboot,
)
from remediation.plan.planner import PlanResult, RemediationMemory, RemediationPolicy, plan
from remediation.plan.recovery import RecoveryRules, record_results, retry_delay_s

T0 = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
INCIDENT = "inc-gpu-node-0-20261202T140000Z-ab12"
GPU = "GPU-5c1f8d6e-0f8a-4c1e-9a55-3b7f2c9d0a11"
DRAINING = RemediationPolicy(drain=True, drain_deadline_s=600.0)
RULES = RecoveryRules(
    max_attempts=3, retry_backoff_s=60.0, retry_backoff_max_s=100.0, reboot_deadline_s=1800.0
)
FACTS = NodeFacts(drained_incident=INCIDENT, drain_finished_incident=INCIDENT, boot_id="boot-1")


def health(action: Action = Action.RESET_GPU) -> NodeHealth:
    incident = Incident(id=INCIDENT, started_at=T0, reasons=["R"], gpus=[GPU], action=action)
    return NodeHealth(
        node="gpu-node-0", state=NodeState.UNHEALTHY, since=T0, incident=incident, reason="R", message="m"
    )


def memory_at(phase: RecoveryPhase, **fields: object) -> RemediationMemory:
    record = RecoveryRecord(incident_id=INCIDENT, phase=phase, **fields)
    return RemediationMemory(drained=(INCIDENT,), active_incident=INCIDENT, recovery=record)


def plan_at(
    now: datetime | None,
    memory: RemediationMemory,
    action: Action = Action.RESET_GPU,
    facts: NodeFacts = FACTS,
) -> PlanResult:
    return plan(health(action), facts, DRAINING, memory, recovery=RULES, now=now)


def recovery_steps(result: PlanResult) -> list[Step]:
    return [
        s
        for s in result.steps
        if isinstance(s, Reset | Reboot | Validate | WithdrawReboot)
        or (isinstance(s, RequestPermit) and s.purpose != "drain")
    ]


@pytest.mark.parametrize(("failed", "delay"), [(0, 0.0), (1, 60.0), (2, 100.0), (3, 100.0), (500, 100.0)])
def test_the_backoff_doubles_after_each_failure_and_is_capped(failed: int, delay: float) -> None:
    """60 s after the first failure, 120 s after the second, but never more than the cap (100 s here)."""
    assert retry_delay_s(failed, RULES) == delay


def test_doubling_below_the_cap() -> None:
    rules = RecoveryRules(retry_backoff_s=10.0, retry_backoff_max_s=1000.0)

    assert [retry_delay_s(n, rules) for n in (1, 2, 3, 4)] == [10.0, 20.0, 40.0, 80.0]


def test_a_failed_attempt_waits_its_backoff_before_the_next_one() -> None:
    """Attempt 1 (planned at T0) failed: until T0+60 s no step, a note says when attempt 2 comes; at
    T0+60 s attempt 2 is planned behind its permit, and the record remembers when."""
    memory = memory_at(RecoveryPhase.READY, attempts=1, attempted_at=T0)

    early = plan_at(T0 + timedelta(seconds=59), memory)
    due = plan_at(T0 + timedelta(seconds=60), memory)

    assert recovery_steps(early) == []
    assert any("attempt 2 in 1 s" in note and "backoff" in note for note in early.notes)
    assert recovery_steps(due) == [
        RequestPermit(purpose="reset", incident_id=INCIDENT),
        Reset(INCIDENT, (GPU,), attempt=2),
    ]
    assert due.memory.recovery is not None
    assert due.memory.recovery.attempted_at == T0 + timedelta(seconds=60)


def test_the_first_attempt_is_stamped_and_does_not_wait() -> None:
    """No failure yet: no backoff; the planned attempt carries the time it was planned."""
    result = plan(health(), FACTS, DRAINING, RemediationMemory(drained=(INCIDENT,)), recovery=RULES, now=T0)

    assert Reset(INCIDENT, (GPU,), attempt=1) in result.steps
    assert result.memory.recovery == RecoveryRecord(incident_id=INCIDENT, attempted_at=T0)


def test_without_a_clock_there_is_neither_backoff_nor_deadline() -> None:
    """A caller that passes no ``now`` gets the attempt at once and a reboot that waits without limit."""
    failed_once = memory_at(RecoveryPhase.READY, attempts=1, attempted_at=T0)
    rebooting = memory_at(RecoveryPhase.REBOOTING, attempts=1, boot_id="boot-1", attempted_at=T0)

    assert Reset(INCIDENT, (GPU,), attempt=2) in recovery_steps(plan_at(None, failed_once))
    assert recovery_steps(plan_at(None, rebooting, Action.REBOOT)) == []


def test_a_reboot_not_done_by_its_deadline_is_withdrawn() -> None:
    """Same boot id 30 minutes after the request: WithdrawReboot for that attempt (no permit needed)."""
    memory = memory_at(RecoveryPhase.REBOOTING, attempts=1, boot_id="boot-1", attempted_at=T0)

    waiting = plan_at(T0 + timedelta(seconds=1799), memory, Action.REBOOT)
    overdue = plan_at(T0 + timedelta(seconds=1800), memory, Action.REBOOT)

    assert recovery_steps(waiting) == []
    assert recovery_steps(overdue) == [WithdrawReboot(INCIDENT, attempt=1, waited_s=1800.0)]


def test_a_rebooting_record_without_a_start_time_starts_its_deadline_now() -> None:
    """A record written before deadlines existed: its wait is timed from the first pass that sees it."""
    memory = memory_at(RecoveryPhase.REBOOTING, attempts=1, boot_id="boot-1")

    result = plan_at(T0, memory, Action.REBOOT)

    assert recovery_steps(result) == []
    assert result.memory.recovery is not None and result.memory.recovery.attempted_at == T0


def test_a_node_that_comes_back_after_its_request_was_withdrawn_is_validated_not_rebooted_again() -> None:
    """The deadline passed (record ready for attempt 2), then kured rebooted after all: validate."""
    memory = memory_at(RecoveryPhase.READY, attempts=1, boot_id="boot-1", attempted_at=T0)
    back = NodeFacts(drain_finished_incident=INCIDENT, boot_id="boot-2")

    result = plan_at(T0 + timedelta(hours=1), memory, Action.REBOOT, facts=back)

    assert recovery_steps(result) == [Validate(INCIDENT, after="reboot")]


def test_nothing_is_planned_while_the_incidents_validation_runs() -> None:
    """facts.validation_running names the incident: no Validate (one run at a time); once it is no longer
    running, Validate is planned again to collect the outcome (or start anew after a restart)."""
    memory = memory_at(RecoveryPhase.VALIDATING, attempts=1, attempted_at=T0)
    running = NodeFacts(drain_finished_incident=INCIDENT, boot_id="boot-1", validation_running=INCIDENT)

    during = plan_at(T0, memory, facts=running)
    after = plan_at(T0, memory)

    assert recovery_steps(during) == []
    assert any("is running" in note for note in during.notes)
    assert recovery_steps(after) == [Validate(INCIDENT, after="reset")]


# --- results -> record ------------------------------------------------------------------------------------


def test_a_withdrawn_reboot_is_a_failed_attempt() -> None:
    """WithdrawReboot's result makes the record ready for the next attempt, or failed on the last one."""
    rebooting = RecoveryRecord(
        incident_id=INCIDENT, phase=RecoveryPhase.REBOOTING, attempts=1, boot_id="boot-1"
    )
    last = rebooting.model_copy(update={"attempts": 3})

    retry = record_results(rebooting, [StepResult(WithdrawReboot(INCIDENT, 1, 1800.0), False, "x")], RULES)
    out = record_results(last, [StepResult(WithdrawReboot(INCIDENT, 3, 1800.0), False, "x")], RULES)

    assert retry is not None and (retry.phase, retry.attempts) == (RecoveryPhase.READY, 1)
    assert out is not None and out.phase is RecoveryPhase.FAILED
    assert out.detail == "recovery failed after 3 attempt(s): x"


def test_a_validation_started_in_the_background_is_not_a_pass() -> None:
    """A pending Validate result keeps (or puts) the record in ``validating``; it never reaches testing."""
    came_back = RecoveryRecord(
        incident_id=INCIDENT, phase=RecoveryPhase.REBOOTING, attempts=1, boot_id="boot-1"
    )
    started = StepResult(Validate(INCIDENT, "reboot"), True, "diagnostic started", pending=True)

    record = record_results(came_back, [started], RULES)

    assert record is not None and record.phase is RecoveryPhase.VALIDATING
    assert record.detail == "diagnostic started"


def test_the_settings_give_the_rules_their_timing() -> None:
    settings = RecoverySettings(
        enabled=True,
        retry_backoff_s=30.0,
        retry_backoff_max_s=10.0,  # below the first wait: the cap is raised to it
        reboot=RebootSettings(deadline_s=600.0),
    )

    rules = settings.rules()

    assert rules is not None
    assert (rules.retry_backoff_s, rules.retry_backoff_max_s, rules.reboot_deadline_s) == (30.0, 30.0, 600.0)
