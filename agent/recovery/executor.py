"""The recovery steps' executor, and the composite that puts it beside the orchestrator's executor.

:class:`RecoveringExecutor` is what the loop sees when recovery is on: ``Reset``, ``Reboot``,
``WithdrawReboot`` and ``Validate`` go to :class:`LocalRecovery` (on this node, through its
:class:`~agent.recovery.actions.NodeActions`), every other step to the wrapped orchestrator executor, in plan
order. Its facts are the wrapped executor's plus what recovery needs: the incident whose drain has ended, the
boot id, and the incident whose validation runs in the background. Every other member of
``NodeExecutor`` (``drain_updates``, ``drain_state``, ``synced`` ...) is forwarded to the wrapped executor
by name.
"""

from __future__ import annotations

import dataclasses
import threading

import structlog

from agent.recovery.actions import NodeActions
from agent.recovery.background import BackgroundValidation
from agent.recovery.commands import CommandOutcome
from agent.recovery.reset import GpuResetter
from agent.recovery.validation import StoppableValidator
from core.aggregator_api import DrainPhase
from core.steps import (
    NodeFacts,
    Reboot,
    Reset,
    Step,
    StepResult,
    Validate,
    WithdrawReboot,
)
from remediation.executor.contract import NodeExecutor, WrappingExecutor
from remediation.plan.recovery import RecoveryRules, retry_delay_s

log = structlog.get_logger(__name__)

RecoveryStep = Reset | Reboot | Validate | WithdrawReboot


@dataclasses.dataclass(frozen=True)
class LocalRecoveryParts:
    """What :class:`LocalRecovery` acts with: the NVML-checked resetter, the node's actions, the rules (for
    the timeline's "next attempt in ..." and "no attempt left")."""

    resetter: GpuResetter
    actions: NodeActions
    rules: RecoveryRules


class LocalRecovery:
    """Performs the recovery steps on this node; answers each with a ``StepResult``, never raises."""

    def __init__(self, node: str, parts: LocalRecoveryParts, wake: threading.Event | None = None) -> None:
        self._parts = parts
        self.validation = BackgroundValidation(node, wake)
        self._log = log.bind(node=node)

    def close(self, timeout_s: float = 5.0) -> None:
        """Agent shutdown: end a validation diagnostic still running and wait for its thread. The record
        still says ``validating``; the next agent starts the validation again (the starts are counted)."""
        validator = self._parts.actions.validator
        if isinstance(validator, StoppableValidator):
            validator.stop()
        self.validation.wait(timeout_s)

    def boot_id(self) -> str | None:
        """This boot's id, or None when it cannot be read."""
        return self._parts.actions.boot_id()

    def apply(self, step: RecoveryStep, *, dry_run: bool = False) -> StepResult:
        """Reset, request or withdraw a reboot, or validate, as the step says (a dry run only says what it
        would do). A validation that has to run a diagnostic answers ``pending``; see ``background.py``."""
        if dry_run:
            return StepResult(step, ok=True, detail=f"dry run: would {_describe(step)}", attempts=0)
        if isinstance(step, Validate):
            result = self._validate(step)
        else:
            outcome = self._attempt(step)
            result = StepResult(step, ok=outcome.ok, detail=outcome.detail)
        self._log.info(
            "recovery_step",
            step=type(step).__name__,
            incident=step.incident_id,
            ok=result.ok,
            pending=result.pending,
            detail=result.detail,
        )
        return result

    def _attempt(self, step: Reset | Reboot | WithdrawReboot) -> CommandOutcome:
        match step:
            case Reset(gpus=gpus):
                outcome = self._parts.resetter.reset(gpus)
            case Reboot(incident_id=incident_id):
                outcome = self._parts.actions.request_reboot(incident_id)
            case WithdrawReboot(waited_s=waited_s):
                withdrawn = self._parts.actions.withdraw_reboot()
                detail = f"no reboot within {waited_s:g} s (same boot id)" + (
                    f"; {withdrawn}" if withdrawn else ""
                )
                outcome = CommandOutcome(ok=False, detail=detail)
        detail = f"attempt {step.attempt}: {outcome.detail}"
        if not outcome.ok:
            detail += "; " + _what_next(step.attempt, self._parts.rules)
        return dataclasses.replace(outcome, detail=detail)

    def _validate(self, step: Validate) -> StepResult:
        ended = self.validation.take(step.incident_id)
        if ended is not None:  # the background run's outcome, collected on this later pass
            return StepResult(step, ok=ended.passed, detail=ended.detail)
        prefix = ""
        if step.after == "reboot":
            prefix = "node came back (new boot id); "
            self._parts.actions.withdraw_reboot()  # a sentinel left over (the boot normally clears it)
        validator = self._parts.actions.validator
        at_once = validator.immediate()
        if at_once is not None:
            return StepResult(step, ok=at_once.passed, detail=prefix + at_once.detail)
        limit = self._parts.rules.max_validation_starts
        if step.start > limit:  # each earlier run died with the agent: stop instead of validating forever
            detail = f"the diagnostic was started {limit} time(s) and never finished (agent restarts?)"
            return StepResult(step, ok=False, detail=prefix + detail)
        busy = self.validation.start(step.incident_id, validator.validate)
        detail = busy or "diagnostic started in the background"
        return StepResult(step, ok=busy is None, detail=prefix + detail, pending=True)


def _what_next(attempt: int, rules: RecoveryRules) -> str:
    """The timeline's hint after a failed attempt: when the next one runs, or that none is left."""
    if attempt >= rules.max_attempts:
        return "no attempt left: escalating to replace"
    return f"next attempt in {retry_delay_s(attempt, rules):g} s"


class RecoveringExecutor(WrappingExecutor):
    """The orchestrator's executor, with the recovery steps sent to :class:`LocalRecovery` instead."""

    def __init__(self, wrapped: NodeExecutor, local: LocalRecovery) -> None:
        super().__init__(wrapped)
        self.local = local

    def takes(self, step: Step) -> bool:
        return isinstance(step, RecoveryStep)

    def apply_own(self, step: Step, *, dry_run: bool) -> StepResult:
        assert isinstance(step, RecoveryStep)
        return self.local.apply(step, dry_run=dry_run)

    def facts(self) -> NodeFacts:
        facts = self.wrapped.facts()
        if not facts.exists:
            return facts
        finished = facts.drain_finished_incident or _finished_drain(self.wrapped)
        return dataclasses.replace(
            facts,
            drain_finished_incident=finished,
            boot_id=self.local.boot_id(),
            validation_running=self.local.validation.running,
        )

    def close(self) -> None:
        try:
            self.local.close()
        finally:
            self.wrapped.close()


def _finished_drain(executor: NodeExecutor) -> str | None:
    """The incident whose background drain has ended (complete, incomplete or failed), if any."""
    state = executor.drain_state
    if state is None or state.phase == DrainPhase.RUNNING:
        return None
    return state.incident_id


def _describe(step: RecoveryStep) -> str:
    match step:
        case Reset(gpus=gpus):
            return f"reset {', '.join(gpus) if gpus else 'every GPU'}"
        case Reboot():
            return "request a reboot"
        case Validate(after=after):
            return f"validate the GPUs after the {after}"
        case WithdrawReboot(attempt=attempt):
            return f"withdraw the reboot request of attempt {attempt}"
