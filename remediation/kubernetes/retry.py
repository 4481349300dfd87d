"""Retries at the Kubernetes API boundary: only retryable errors, bounded by attempts and a per-step deadline.

Retryable: 429 (waiting what ``Retry-After`` says), 500/502/503/504, 409 Conflict (the operation re-reads the
node and re-applies), and transport failures (connection refused or reset, timeouts) that urllib3 raises.
Everything else (400, 403, 404, 422 ...) fails at once: asking again would get the same answer. A 403 the
executor made (``KubeRefused``) carries its ``Refusal``; the executor logs it once and holds its writes.

The deadline is short on purpose: the agent loop re-plans and re-applies on its next tick, so an outage of
minutes costs a few failed ticks, never a loop blocked for minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Generic, TypeVar

import structlog
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception

from remediation.kubernetes.errors import KubeRefused, Refusal, api_error
from remediation.kubernetes.settings import RetrySettings

log = structlog.get_logger(__name__)

Result = TypeVar("Result")

RETRYABLE_STATUSES = frozenset(
    {
        HTTPStatus.CONFLICT,
        HTTPStatus.TOO_MANY_REQUESTS,
        HTTPStatus.INTERNAL_SERVER_ERROR,
        HTTPStatus.BAD_GATEWAY,
        HTTPStatus.SERVICE_UNAVAILABLE,
        HTTPStatus.GATEWAY_TIMEOUT,
    }
)


@dataclass(frozen=True)
class Failure:
    """A failed request in one line: HTTP status (0 for transport errors), reason, and Retry-After; for a
    403 on one of the executor's requests, what was refused."""

    status: int
    reason: str
    retry_after_s: float | None = None
    refusal: Refusal | None = None

    @property
    def retryable(self) -> bool:
        """Whether asking again could get another answer."""
        return self.status == 0 or self.status in RETRYABLE_STATUSES

    @property
    def server_unavailable(self) -> bool:
        """The server is down, unreachable or throttling us (not a problem with this one request)."""
        return (
            self.status in {0, HTTPStatus.TOO_MANY_REQUESTS}
            or self.status >= HTTPStatus.INTERNAL_SERVER_ERROR
        )

    def describe(self) -> str:
        """One line for StepResult.detail and logs."""
        return f"HTTP {self.status} {self.reason}" if self.status else f"transport error: {self.reason}"


def classify(error: BaseException) -> Failure | None:
    """Describe an API or transport error; None for anything else (a bug, which must not be retried)."""
    if isinstance(error, ApiException):
        typed = api_error(error)
        reason = str(typed.reason or "").splitlines()[0] if typed.reason else "error"
        refusal = typed.refusal if isinstance(typed, KubeRefused) else None
        return Failure(int(typed.status or 0) or 500, reason, typed.retry_after_s, refusal)
    if isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        return Failure(0, type(error).__name__)
    return None


def _is_retryable(error: BaseException) -> bool:
    failure = classify(error)
    return failure is not None and failure.retryable


class RetryPolicy:
    """Runs one operation with the settings above; ``sleep`` is injected so tests do not wait."""

    def __init__(
        self,
        settings: RetrySettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._monotonic = monotonic
        self._wall = wall
        self._throttled_until = 0.0  # wall-clock seconds: a Retry-After that outlived a step's deadline

    def _wait(self, state: RetryCallState) -> float:
        failure = _failure_of(state)
        if failure is not None and failure.retry_after_s is not None:
            return failure.retry_after_s  # the server said when; earlier would only be refused again
        backoff = self.settings.initial_wait_s * 2 ** (state.attempt_number - 1)
        return float(min(backoff, self.settings.max_wait_s))

    def _stop(self, state: RetryCallState, started: float) -> bool:
        if state.attempt_number >= self.settings.attempts:
            return True
        # Waits are counted as planned (idle_for) so a fake sleep still honours the deadline in tests.
        planned = state.idle_for + (state.upcoming_sleep or 0.0)
        elapsed = self._monotonic() - started
        return planned > self.settings.deadline_s or elapsed + (state.upcoming_sleep or 0.0) > (
            self.settings.deadline_s
        )

    def call(self, operation: Callable[[], Result], *, step: str) -> Outcome[Result]:
        """Run ``operation`` until it succeeds or must stop; API and transport errors end in the outcome.

        A ``Retry-After`` longer than the deadline is honoured across calls: until it has passed, ``call``
        sends nothing and answers a 429 failure at once.
        """
        throttled_for = self._throttled_until - self._wall()
        if throttled_for > 0:
            log.info(
                "kubernetes API asked us to wait, not sending", step=step, wait_s=round(throttled_for, 3)
            )
            return Outcome(value=None, attempts=0, failure=Failure(429, "throttled: waiting for Retry-After"))
        started = self._monotonic()

        def log_attempt(state: RetryCallState) -> None:
            failure = _failure_of(state)
            log.warning(
                "kubernetes request failed, retrying",
                step=step,
                attempt=state.attempt_number,
                status=failure.status if failure else None,
                error=failure.describe() if failure else None,
                wait_s=round(state.upcoming_sleep or 0.0, 3),
            )

        retrying = Retrying(
            retry=retry_if_exception(_is_retryable),
            wait=self._wait,
            stop=lambda state: self._stop(state, started),
            sleep=self._sleep,
            before_sleep=log_attempt,
            reraise=True,
        )
        attempts = 0

        def counted() -> Result:
            nonlocal attempts
            attempts += 1
            return operation()

        try:
            return Outcome(value=retrying(counted), attempts=attempts)
        except (ApiException, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as error:
            failure = classify(error) or Failure(0, type(error).__name__)
            if failure.retry_after_s is not None:
                self._throttled_until = self._wall() + failure.retry_after_s
            if failure.refusal is not None:
                return Outcome(value=None, attempts=attempts, failure=failure)  # the executor logs it once
            log.warning(
                "kubernetes request failed, giving up for this pass",
                step=step,
                attempt=attempts,
                status=failure.status,
                error=failure.describe(),
                retryable=failure.retryable,
            )
            return Outcome(value=None, attempts=attempts, failure=failure)


def _failure_of(state: RetryCallState) -> Failure | None:
    error = state.outcome.exception() if state.outcome is not None else None
    return classify(error) if error is not None else None


@dataclass(frozen=True)
class Outcome(Generic[Result]):
    """What one retried operation came to: its value, or the last failure, and how many attempts it took."""

    value: Result | None
    attempts: int
    failure: Failure | None = None

    @property
    def ok(self) -> bool:
        """True when the operation succeeded."""
        return self.failure is None
