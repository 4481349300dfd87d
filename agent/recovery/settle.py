"""After each pass: the recovery steps' results move the planner's record on and drive the state machine.

Called by the loop right after the executor answered (never in a dry run). A validation that passed makes
the node ``testing`` (clean readings release it); a failed validation, or a failed attempt that was the
last one allowed, escalates the incident to ``replace``: the node stays quarantined and the aggregator
raises the escalation alert when the next report arrives.
"""

from __future__ import annotations

from agent.state.machine import HealthStateMachine
from core.plan_memory import RemediationMemory
from core.recovery_record import RecoveryPhase
from core.steps import ApplyReport
from remediation.plan.recovery import RecoveryRules, record_results


def settle_recovery(
    memory: RemediationMemory, report: ApplyReport, machine: HealthStateMachine, rules: RecoveryRules
) -> RemediationMemory:
    """The memory with the recovery record updated from ``report``; the state machine told what follows."""
    before = memory.recovery
    record = record_results(before, report.results, rules)
    if record is None or record == before:
        return memory
    moved = before is None or before.phase is not record.phase
    if moved and record.phase is RecoveryPhase.TESTING:
        machine.begin_testing(rules.clean_readings)
    elif moved and record.phase is RecoveryPhase.FAILED:
        machine.recovery_failed(record.detail)
    return memory.model_copy(update={"recovery": record})
