"""Validation starts are counted per incident in the persisted recovery record: an agent killed in the middle
of every validation run escalates the incident to ``replace`` after ``max_validation_starts`` starts instead
of validating forever, while a run that does finish is still collected."""

from __future__ import annotations

import threading
from pathlib import Path

from waiting import HANG_GUARD_S

from agent.recovery.actions import HostActions
from agent.recovery.executor import LocalRecovery, LocalRecoveryParts
from agent.recovery.reset import GpuResetter
from agent.recovery.settings import RecoverySettings, ValidationSettings
from agent.recovery.validation import ValidationOutcome
from core.recovery_record import RecoveryPhase, RecoveryRecord
from core.steps import StepResult, Validate
from remediation.plan.recovery import RecoveryRules, plan_recovery, record_results
from sim.fakes.nvml import FakeNvml
from tests.unit.remediation.plan.test_recovery import DRAIN_DONE, DRAINED, INCIDENT, health

RULES = RecoveryRules(max_validation_starts=3)


class HeldValidator:
    """A diagnostic that runs until the test lets it end (an agent killed meanwhile never sees it end)."""

    def __init__(self, passed: bool = True) -> None:
        self.release = threading.Event()
        self.started = 0
        self._passed = passed

    def immediate(self) -> ValidationOutcome | None:
        return None

    def validate(self) -> ValidationOutcome:
        self.started += 1
        self.release.wait(HANG_GUARD_S)
        return ValidationOutcome(self._passed, "dcgmi diag -r 2 passed")


def fresh_agent(tmp_path: Path, validator: HeldValidator) -> LocalRecovery:
    """The node-local recovery of a newly started agent process: no run, no outcome in memory."""
    actions = HostActions(RecoverySettings(boot_id_path=tmp_path / "boot_id"), validator=validator)
    nvml = FakeNvml("h100_sxm", 1, seed=1)
    parts = LocalRecoveryParts(resetter=GpuResetter(nvml, actions.reset_gpu), actions=actions, rules=RULES)
    return LocalRecovery("gpu-node-0", parts)


def one_pass(record: RecoveryRecord, local: LocalRecovery) -> tuple[RecoveryRecord, StepResult]:
    """Plan from the persisted record, apply the Validate step on this node, fold the result back in."""
    memory = DRAIN_DONE.model_copy(update={"recovery": record})
    planned = plan_recovery(health(), DRAINED, memory, RULES)
    (step,) = planned.steps
    assert isinstance(step, Validate)
    result = local.apply(step)
    folded = record_results(planned.record, [result], RULES)
    assert folded is not None
    return folded, result


def test_the_planned_validate_carries_which_start_it_would_be() -> None:
    record = RecoveryRecord(incident_id=INCIDENT, phase=RecoveryPhase.VALIDATING, validation_starts=2)
    memory = DRAIN_DONE.model_copy(update={"recovery": record})

    assert plan_recovery(health(), DRAINED, memory, RULES).steps == [
        Validate(INCIDENT, after="reset", start=3)
    ]


def test_an_agent_killed_mid_validation_every_time_escalates_after_the_limit(tmp_path: Path) -> None:
    """Three starts, each lost with its process: the fourth pass refuses a fourth start and the record
    fails (the settle step escalates a failed record to replace); the validator ran exactly three times."""
    validator = HeldValidator()
    record = RecoveryRecord(incident_id=INCIDENT, phase=RecoveryPhase.VALIDATING, attempts=1)
    for start in (1, 2, 3):
        record, result = one_pass(record, fresh_agent(tmp_path, validator))
        assert result.pending and result.ok
        assert (record.phase, record.validation_starts) == (RecoveryPhase.VALIDATING, start)
        restored = RecoveryRecord.model_validate_json(record.model_dump_json())  # the state file
        assert restored.validation_starts == start
        record = restored

    record, result = one_pass(record, fresh_agent(tmp_path, validator))

    assert not result.ok and not result.pending
    assert "started 3 time(s) and never finished" in result.detail
    assert record.phase is RecoveryPhase.FAILED
    validator.release.set()
    assert validator.started == 3


def test_the_last_allowed_run_that_finishes_is_still_collected(tmp_path: Path) -> None:
    """At the limit, the outcome of the run this very process started is handed over, not refused."""
    validator = HeldValidator()
    record = RecoveryRecord(
        incident_id=INCIDENT, phase=RecoveryPhase.VALIDATING, attempts=1, validation_starts=2
    )
    local = fresh_agent(tmp_path, validator)
    record, result = one_pass(record, local)
    assert result.pending and record.validation_starts == 3
    validator.release.set()
    assert local.validation.wait(HANG_GUARD_S)

    record, result = one_pass(record, local)

    assert result.ok and not result.pending
    assert record.phase is RecoveryPhase.TESTING


def test_a_start_refused_because_one_already_runs_is_not_counted() -> None:
    record = RecoveryRecord(incident_id=INCIDENT, phase=RecoveryPhase.VALIDATING, validation_starts=1)
    busy = StepResult(Validate(INCIDENT, after="reset", start=2), ok=False, detail="busy", pending=True)

    folded = record_results(record, [busy], RULES)

    assert folded is not None and folded.validation_starts == 1


def test_the_limit_is_a_setting() -> None:
    settings = RecoverySettings(enabled=True, validation=ValidationSettings(max_starts=5))
    rules = settings.rules()
    assert rules is not None and rules.max_validation_starts == 5
    default = RecoverySettings(enabled=True).rules()
    assert default is not None and default.max_validation_starts == 3
