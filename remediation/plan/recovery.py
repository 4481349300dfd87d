"""The pure rules of the recovery loop: after the drain, reset or reboot, then validate (docs/recovery.md).

:func:`plan_recovery` is called by ``remediation.plan.planner.plan`` last, after the drain rule, and adds at
most one recovery step per pass:

* Only with recovery on, for an open incident on an ``unhealthy`` node whose action is ``reset_gpu``,
  ``drain_and_reset`` or ``reboot`` (``replace`` waits for a human; ``testing`` and ``quarantined`` nodes
  get nothing), that no human released or uncordoned, and only once its drain has ended
  (``facts.drain_finished_incident``, then remembered in ``memory.recovery`` across restarts).
* ``ready``: ``RequestPermit("reset")`` + ``Reset(gpus)`` for a reset action, ``RequestPermit("reboot")``
  + ``Reboot(boot_id)`` for a reboot (never when the boot id is unreadable, nor with reboots off), with
  the attempt number. The attempt counts only once its result comes back (:func:`record_results`), so a
  step withheld for want of a permit is simply planned again. After a failed attempt the next one waits a
  backoff (:func:`retry_delay_s`: doubling, capped) counted from when the failed one was planned.
* ``rebooting``: nothing until ``facts.boot_id`` differs from the one remembered — the node came back —
  then ``Validate(after="reboot")``; past ``reboot_deadline_s`` without it, ``WithdrawReboot``: the
  attempt failed. ``validating``: ``Validate`` (after the reset, or the reboot), unless the executor says
  that incident's validation runs in the background (``facts.validation_running``): its outcome comes back
  as the result of a ``Validate`` planned once it ended — after an agent restart, the run that died with the
  old process is started again, at most ``max_validation_starts`` times per incident in all (the record
  counts the starts): an agent killed mid-run over and over escalates to ``replace`` instead.
* ``testing`` and ``failed``: nothing; the state machine releases the node after clean readings, or the
  incident has escalated to ``replace``.

:func:`record_results` folds the executor's results into the record: an attempt that failed (a reboot
withdrawn at its deadline included) makes the record ``ready`` again until ``max_attempts`` are spent,
then ``failed``; a reset that worked, or a node that came back, makes it ``validating``; a validation that
passed makes it ``testing``, one that failed makes it ``failed``. The caller (``agent/recovery/settle.py``)
escalates the incident on ``failed``. Without ``now`` (a caller with no clock) there is no backoff and no
reboot deadline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from core.findings import Action
from core.health import Incident, NodeHealth, NodeState
from core.plan_memory import RemediationMemory
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

RESET_ACTIONS = frozenset({Action.RESET_GPU, Action.DRAIN_AND_RESET})
RECOVERABLE_ACTIONS = RESET_ACTIONS | {Action.REBOOT}


@dataclass(frozen=True)
class RecoveryRules:
    """What the planner needs to know of the recovery settings (``agent.recovery.settings``)."""

    max_attempts: int = 2
    reboot: bool = True  # False: reboot mode "off", a reboot incident waits for a human
    clean_readings: int = 3  # consecutive clean readings that release a validated node
    retry_backoff_s: float = 60.0  # wait after the first failed attempt; doubled after each further one
    retry_backoff_max_s: float = 900.0  # the longest wait between two attempts
    reboot_deadline_s: float = 1800.0  # a requested reboot not done by then is a failed attempt
    max_validation_starts: int = 3  # validation diagnostics started per incident before it escalates


def retry_delay_s(failed_attempts: int, rules: RecoveryRules) -> float:
    """Seconds between a failed attempt and the next one: ``retry_backoff_s``, doubled for each further
    failure, at most ``retry_backoff_max_s`` (0 before any failure)."""
    if failed_attempts < 1:
        return 0.0
    doublings = min(failed_attempts - 1, 32)  # 2**32 is past any cap; keeps the float finite
    return float(min(rules.retry_backoff_s * 2**doublings, rules.retry_backoff_max_s))


@dataclass
class RecoveryPlan:
    """The recovery step(s) of one pass, the record to remember, and notes for the log."""

    steps: list[Step] = field(default_factory=list)
    record: RecoveryRecord | None = None
    notes: list[str] = field(default_factory=list)


def plan_recovery(
    health: NodeHealth,
    facts: NodeFacts,
    memory: RemediationMemory,
    rules: RecoveryRules | None,
    now: datetime | None = None,
) -> RecoveryPlan:
    """At most one recovery step (behind its permit) for the open incident; see the module docstring."""
    incident = health.incident
    result = RecoveryPlan(record=memory.recovery)
    if rules is None or incident is None or health.state is not NodeState.UNHEALTHY:
        return result
    if incident.action not in RECOVERABLE_ACTIONS:
        return result
    if memory.overridden(incident.id) or memory.uncordoned_by_human(incident.id):
        return result
    record = _record_for(incident, facts, memory.recovery)
    if record is None:
        return result
    result.record = record
    match record.phase:
        case RecoveryPhase.READY if _came_back(record, facts):  # a reboot withdrawn, then done late
            result.notes.append(f"the node came back late from its reboot for {incident.id}: validating")
            _validate(result, incident, facts, record, "reboot")
        case RecoveryPhase.READY:
            _attempt(result, incident, facts, record, rules, now=now)
        case RecoveryPhase.REBOOTING:
            _await_reboot(result, incident, facts, record, rules, now=now)
        case RecoveryPhase.VALIDATING:
            _validate(result, incident, facts, record, "reboot" if record.boot_id is not None else "reset")
        case _:  # testing (the state machine decides) or failed (escalated to replace)
            pass
    return result


def _record_for(incident: Incident, facts: NodeFacts, record: RecoveryRecord | None) -> RecoveryRecord | None:
    """This incident's record: the remembered one, or a new one once its drain has ended; else None."""
    if record is not None and record.incident_id == incident.id:
        return record
    if facts.drain_finished_incident == incident.id:
        return RecoveryRecord(incident_id=incident.id)
    return None


def _came_back(record: RecoveryRecord, facts: NodeFacts) -> bool:
    """Another boot id than the one remembered at the reboot request: the node rebooted since."""
    return record.boot_id is not None and facts.boot_id is not None and facts.boot_id != record.boot_id


def _attempt(
    result: RecoveryPlan,
    incident: Incident,
    facts: NodeFacts,
    record: RecoveryRecord,
    rules: RecoveryRules,
    *,
    now: datetime | None,
) -> None:
    attempt = record.attempts + 1
    if attempt > rules.max_attempts:  # record_results escalates first; kept as a guard
        result.notes.append(f"recovery of {incident.id}: {record.attempts} attempts spent")
        return
    wait_s = _backoff_left_s(record, rules, now)
    if wait_s > 0:
        result.notes.append(
            f"recovery of {incident.id}: attempt {attempt} in {wait_s:.0f} s "
            f"(backoff after {record.attempts} failed attempt(s))"
        )
        return
    step: Step
    if incident.action in RESET_ACTIONS:
        purpose, step = "reset", Reset(incident.id, gpus=tuple(incident.gpus), attempt=attempt)
    elif not rules.reboot:
        result.notes.append(f"{incident.id} needs a reboot and reboots are off: waiting for a human")
        return
    elif facts.boot_id is None:
        result.notes.append(f"{incident.id}: the boot id is unreadable, so no reboot is requested")
        return
    else:
        purpose, step = "reboot", Reboot(incident.id, boot_id=facts.boot_id, attempt=attempt)
    result.steps.extend([RequestPermit(purpose=purpose, incident_id=incident.id), step])
    result.record = record.model_copy(update={"attempted_at": now})


def _backoff_left_s(record: RecoveryRecord, rules: RecoveryRules, now: datetime | None) -> float:
    """Seconds until the next attempt may run (0: now); counted from when the failed one was planned."""
    if now is None or record.attempted_at is None or record.attempts == 0:
        return 0.0
    due = record.attempted_at + timedelta(seconds=retry_delay_s(record.attempts, rules))
    return max((due - now).total_seconds(), 0.0)


def _await_reboot(
    result: RecoveryPlan,
    incident: Incident,
    facts: NodeFacts,
    record: RecoveryRecord,
    rules: RecoveryRules,
    *,
    now: datetime | None,
) -> None:
    if _came_back(record, facts):
        result.notes.append(f"the node came back from its reboot for {incident.id}: validating")
        _validate(result, incident, facts, record, "reboot")
        return
    if now is None:
        return
    if record.attempted_at is None:  # a record from before deadlines existed: the wait starts now
        result.record = record.model_copy(update={"attempted_at": now})
        return
    if (now - record.attempted_at).total_seconds() >= rules.reboot_deadline_s:
        waited = WithdrawReboot(incident.id, attempt=record.attempts, waited_s=rules.reboot_deadline_s)
        result.steps.append(waited)


def _validate(
    result: RecoveryPlan,
    incident: Incident,
    facts: NodeFacts,
    record: RecoveryRecord,
    after: Literal["reset", "reboot"],
) -> None:
    """``Validate``, unless this incident's validation already runs in the background. The step carries
    which start it would be: the node side refuses a start past the limit (``agent/recovery/executor.py``)
    but still hands over a finished run's outcome, which only it knows of."""
    if facts.validation_running == incident.id:
        result.notes.append(f"the validation of {incident.id} is running")
        return
    result.steps.append(Validate(incident.id, after=after, start=record.validation_starts + 1))


def record_results(
    record: RecoveryRecord | None, results: Iterable[StepResult], rules: RecoveryRules
) -> RecoveryRecord | None:
    """The record once the recovery steps' results are known (other steps' results are ignored)."""
    for outcome in results:
        step = outcome.step
        if record is None or not isinstance(step, Reset | Reboot | Validate | WithdrawReboot):
            continue
        if step.incident_id != record.incident_id:
            continue
        record = _after(record, step, outcome, rules)
    return record


def _after(
    record: RecoveryRecord,
    step: Reset | Reboot | Validate | WithdrawReboot,
    outcome: StepResult,
    rules: RecoveryRules,
) -> RecoveryRecord:
    detail = outcome.detail[:300]
    if isinstance(step, Validate):
        if outcome.pending:  # started in the background: its outcome comes with a later pass
            starts = max(record.validation_starts, step.start) if outcome.ok else record.validation_starts
            started = {"phase": RecoveryPhase.VALIDATING, "validation_starts": starts, "detail": detail}
            return record.model_copy(update=started)
        if outcome.ok:
            return record.model_copy(update={"phase": RecoveryPhase.TESTING, "detail": detail})
        failed = f"validation failed: {detail}"
        return record.model_copy(update={"phase": RecoveryPhase.FAILED, "detail": failed})
    attempts = max(record.attempts, step.attempt)
    if outcome.ok and isinstance(step, Reset | Reboot):
        phase = RecoveryPhase.REBOOTING if isinstance(step, Reboot) else RecoveryPhase.VALIDATING
        boot_id = step.boot_id if isinstance(step, Reboot) else record.boot_id
        update: dict[str, object] = {"phase": phase, "attempts": attempts, "boot_id": boot_id}
    elif attempts >= rules.max_attempts:  # a withdrawn reboot is a failed attempt, whatever its result
        detail = f"recovery failed after {attempts} attempt(s): {detail}"
        update = {"phase": RecoveryPhase.FAILED, "attempts": attempts}
    else:
        update = {"phase": RecoveryPhase.READY, "attempts": attempts}
    return record.model_copy(update={**update, "detail": detail})
