"""The parts of ``apply`` every executor shares, whatever the orchestrator it writes to.

Each executor maps steps to its own requests and retries them its own way; what does not depend on the
orchestrator lives here so both executors answer alike: the dry run, the steps answered without a request,
the 403 write hold, the pass that stops once the orchestrator proved unavailable, and the audit line of an
applied step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from core.steps import ApplyReport, Drain, Step, StepResult
from remediation.executor.forbidden_hold import ForbiddenHold

Operation = Callable[[], str]


def dry_run_report(steps: Sequence[Step], log: Any) -> ApplyReport:
    """Every step logged as what would be applied and reported done, without a request."""
    report = ApplyReport()
    for step in steps:
        log.info("dry-run: would apply", step=type(step).__name__, **dataclasses.asdict(step))
        report.results.append(StepResult(step=step, ok=True, detail="dry-run", attempts=0))
    return report


def operation_or_answer(
    step: Step, operation_of: Callable[[Step], Operation | None], *, can_drain: bool
) -> Operation | StepResult:
    """The request ``step`` needs, or its result when it needs none: a ``Drain`` with drain switched off
    fails, and a step that is the agent loop's business (``RequestPermit``, ``Requeue``) is done."""
    if isinstance(step, Drain) and not can_drain:
        return StepResult(step=step, ok=False, detail="drain is not configured", attempts=0)
    operation = operation_of(step)
    if operation is None:
        return StepResult(step=step, ok=True, detail="handled by the agent loop", attempts=0)
    return operation


def skip_reason(hold: ForbiddenHold, unavailable: str | None = None) -> str | None:
    """Why a write is not even tried: the pass already found the orchestrator unavailable (an earlier step
    spent its deadline on it, the rest would do the same), or a 403 still holds every write; else None."""
    if unavailable is not None:
        return unavailable
    return hold.skipped()


def log_applied(log: Any, name: str, detail: str, attempts: int, *, wrote: bool) -> None:
    """Mutations are worth an info line each (an audit trail); a step that found nothing to do is not."""
    level = log.info if wrote else log.debug
    level("step applied", step=name, detail=detail, attempts=attempts)
