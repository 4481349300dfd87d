"""Test executors: the members of ``NodeExecutor`` a unit test's fake node has no use for, and a perfect node.

A fake subclasses :class:`ExecutorDefaults` and writes only what its test is about (``facts``, ``apply``,
``wait_for_change``, ``close``); the rest answer as an executor without a drain whose node has been read:
synced, no drain, no refusal held, nothing sent.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.steps import ApplyReport, NodeFacts, Step, StepResult
from remediation.executor.contract import DrainNews, DrainProgress
from remediation.plan.planner import facts_after


class ExecutorDefaults:
    @property
    def synced(self) -> bool:
        return True

    @property
    def can_drain(self) -> bool:
        return False

    @property
    def drain_state(self) -> DrainProgress | None:
        return None

    def drain_updates(self) -> Sequence[DrainNews]:
        return []

    def wait_for_drain(self, timeout_s: float) -> bool:
        return True

    @property
    def problem(self) -> str | None:
        return None

    @property
    def writes_total(self) -> int:
        return 0

    @property
    def requests_total(self) -> int:
        return 0


class PerfectNode(ExecutorDefaults):
    """A node executor that takes every step as a perfect API server would (the node's facts follow the
    steps, a dry run changes nothing), and remembers what it applied."""

    def __init__(self) -> None:
        self.node = NodeFacts()
        self.applied: list[Step] = []

    def facts(self) -> NodeFacts:
        return self.node

    def apply(self, steps: Sequence[Step], *, dry_run: bool = False) -> ApplyReport:
        if not dry_run:
            self.node = facts_after(self.node, steps)
            self.applied.extend(steps)
        return ApplyReport(results=[StepResult(step=step, ok=True) for step in steps])

    def wait_for_change(self, timeout_s: float) -> bool:
        return False

    def close(self) -> None:
        return None
