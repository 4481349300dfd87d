"""The write hold after an orchestrator refused the agent's credential (HTTP 403), for every executor.

A 403 answers the same until a human changes a policy, so asking again on every pass only floods the API
server and the log. After a refusal the executor sends no write for ``hold_s``; the first attempt after that
either succeeds (the permission came back: the problem is gone) or starts a new hold. Meanwhile
``problem`` says why the executor cannot act, which ``remediation.executor.problem`` turns into an
``unknown`` finding. Kubernetes (RBAC, admission policy) and Nomad (ACL) executors share this one rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class ForbiddenHold:
    """Holds writes for ``hold_s`` after a refusal; ``monotonic`` is the executor's clock (fake in tests)."""

    def __init__(self, hold_s: float, monotonic: Callable[[], float]) -> None:
        self._hold_s = hold_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._problem: str | None = None
        self._until: float | None = None

    @property
    def problem(self) -> str | None:
        """Why the executor cannot act (the last refusal), or None once a write went through."""
        return self._problem

    def skipped(self) -> str | None:
        """The detail of a step skipped while the hold lasts; None when it is time to (try to) write."""
        with self._lock:
            if self._until is None:
                return None
            left = self._until - self._monotonic()
            if left <= 0:
                return None
            return f"skipped: {self._problem}; next try in {left:.0f} s"

    def refused(self, problem: str) -> bool:
        """Start a new hold for ``problem``; True when it is news (first refusal, or another one): log it."""
        with self._lock:
            news = problem != self._problem
            self._problem = problem
            self._until = self._monotonic() + self._hold_s
            return news

    def allowed(self) -> bool:
        """A write went through: the hold ends. True when a problem was set (worth one log line)."""
        with self._lock:
            was_held = self._problem is not None
            self._problem = None
            self._until = None
            return was_held
