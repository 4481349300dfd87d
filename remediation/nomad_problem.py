"""Former home of the executor-problem finding source, now ``remediation.executor_problem`` (it serves the
Kubernetes executor too); these names stay importable from here."""

from __future__ import annotations

from remediation.executor_problem import CODE, ExecutorProblemFindings, ExecutorWithProblem

__all__ = ["CODE", "ExecutorProblemFindings", "ExecutorWithProblem"]
