"""Retries at the Nomad boundary: only :class:`NomadUnavailable`, bounded by attempts and a per-step deadline.

403, 404 and 400 fail at once (the same request would get the same answer). The deadline is short on
purpose: the agent loop re-plans and re-applies on its next pass, so an outage costs a few failed passes,
never a loop blocked for minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from remediation.nomad.errors import NomadError, NomadUnavailable
from remediation.nomad.settings import NomadRetrySettings

log = structlog.get_logger(__name__)

Result = TypeVar("Result")


@dataclass(frozen=True)
class NomadOutcome(Generic[Result]):
    """What one retried operation came to: its value, or the last error, and how many attempts it took."""

    value: Result | None
    attempts: int
    error: NomadError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class NomadRetry:
    """Runs one operation under :class:`NomadRetrySettings`; ``sleep`` is injected so tests do not wait."""

    def __init__(
        self,
        settings: NomadRetrySettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._monotonic = monotonic

    def _wait(self, state: RetryCallState) -> float:
        backoff = self.settings.initial_wait_s * 2 ** (state.attempt_number - 1)
        return float(min(backoff, self.settings.max_wait_s))

    def _stop(self, state: RetryCallState, started: float) -> bool:
        if state.attempt_number >= self.settings.attempts:
            return True
        # Waits count as planned (idle_for), so an injected sleep that does not wait still meets the deadline.
        upcoming = state.upcoming_sleep or 0.0
        elapsed = self._monotonic() - started
        return max(state.idle_for, elapsed) + upcoming > self.settings.deadline_s

    def call(self, operation: Callable[[], Result], *, step: str) -> NomadOutcome[Result]:
        """Run ``operation`` until it succeeds or must stop; Nomad errors end in the outcome, not raised."""
        started = self._monotonic()
        attempts = 0

        def counted() -> Result:
            nonlocal attempts
            attempts += 1
            return operation()

        def log_attempt(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "nomad request failed, retrying",
                step=step,
                attempt=state.attempt_number,
                error=error.describe() if isinstance(error, NomadError) else str(error),
                wait_s=round(state.upcoming_sleep or 0.0, 3),
            )

        retrying = Retrying(
            retry=retry_if_exception_type(NomadUnavailable),
            wait=self._wait,
            stop=lambda state: self._stop(state, started),
            sleep=self._sleep,
            before_sleep=log_attempt,
            reraise=True,
        )
        try:
            return NomadOutcome(value=retrying(counted), attempts=attempts)
        except NomadError as error:
            return NomadOutcome(value=None, attempts=attempts, error=error)
