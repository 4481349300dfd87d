"""An executor that cannot act (the orchestrator refused its credential) makes the node's verdict ``unknown``.

The agent keeps running and keeps judging its GPUs, but what it reports must not read as "all is well
here": a finding with status ``unknown`` (docs/checks.md: a source that should answer and cannot)
says the node's remediation is blind, and the aggregator shows the node ``unknown`` once the state
machine's ``unknown_readings`` have passed. The executor itself logs the cause once. Both the Kubernetes
and the Nomad executor expose ``problem`` (see ``remediation.executor.forbidden_hold``).
"""

from __future__ import annotations

from typing import Protocol

from core.findings import Action, Finding, Status
from core.snapshot import NodeSnapshot

CODE = "EXECUTOR_FORBIDDEN"


class ExecutorWithProblem(Protocol):
    """What this source needs of an executor (every ``NodeExecutor`` has it): why it cannot act, if so."""

    @property
    def problem(self) -> str | None: ...


class ExecutorProblemFindings:
    """A finding source (``agent.loop.FindingSource``): an unknown finding while the executor cannot act."""

    def __init__(self, executor: ExecutorWithProblem) -> None:
        self._executor = executor

    def findings(self, snapshot: NodeSnapshot) -> list[Finding]:
        problem = self._executor.problem
        if problem is None:
            return []
        return [
            Finding(
                check="executor",
                gpu=None,
                status=Status.UNKNOWN,
                code=CODE,
                message=problem,
                action=Action.NONE,
            )
        ]
