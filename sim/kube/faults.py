"""Fault injection: make chosen requests fail the way an overloaded or restarting API server does.

A rule matches requests by verb (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
``delete``, ``deletecollection``; ``*`` for any) and resource (``nodes``, ``pods/eviction``,
``jobs.batch``; ``*`` for any), and answers with a status (500, 503, 429 with ``Retry-After``, 409 ...)
and/or a delay, for a number of requests or a span of time on the emulator's clock. An outage makes every
request answer 503, or stops the listener so that connections are refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from core.clock import Clock
from sim.kube.errors import ApiError

_REASONS = {
    409: "Conflict",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class FaultSpecError(ValueError):
    """A fault rule that cannot be applied (unknown verb, no window, nothing to do)."""


VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"})


@dataclass
class FaultRule:
    """One injected fault; ``remaining`` counts down, ``until`` is a monotonic time on the clock."""

    verb: str
    resource: str
    status: int | None
    retry_after: int | None
    delay_s: float
    remaining: int | None
    until: float | None
    message: str

    def matches(self, verb: str, resource: str, now: float) -> bool:
        """Whether this rule applies to a request, now."""
        if self.until is not None and now >= self.until:
            return False
        if self.remaining is not None and self.remaining <= 0:
            return False
        return self.verb in ("*", verb) and self.resource in ("*", resource, resource.split("/", 1)[0])

    def error(self) -> ApiError | None:
        """The answer this rule forces, or None when it only delays."""
        if self.status is None:
            return None
        reason = _REASONS.get(self.status, "InternalError")
        details = {"retryAfterSeconds": self.retry_after} if self.retry_after is not None else None
        return ApiError(self.status, reason, self.message, details=details, retry_after=self.retry_after)


@dataclass(frozen=True)
class FaultOutcome:
    """What to do to one request: wait ``delay_s``, then fail with ``error`` (if any)."""

    delay_s: float = 0.0
    error: ApiError | None = None


class FaultInjector:
    """The rule set the HTTP layer consults before every request."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._outage_until: float | None = None
        self._listener_control: tuple[Callable[[], None], Callable[[], None]] | None = None
        self.injected = 0

    def bind_listener(self, stop: Callable[[], None], start: Callable[[], None]) -> None:
        """Let :meth:`outage` with ``refuse_connections`` stop and restart the HTTP listener."""
        self._listener_control = (stop, start)

    def inject(
        self,
        *,
        verb: str = "*",
        resource: str = "*",
        status: int | None = 503,
        retry_after: int | None = None,
        times: int | None = None,
        seconds: float | None = None,
        delay: float = 0.0,
        message: str | None = None,
    ) -> FaultRule:
        """Add a rule; it stays until ``times`` requests matched or ``seconds`` passed (one is required)."""
        if verb not in VERBS:
            raise FaultSpecError(f"unknown verb {verb!r}; expected one of {sorted(VERBS)}")
        if times is None and seconds is None:
            raise FaultSpecError("a fault needs a window: times=N or seconds=S")
        if status is None and delay <= 0:
            raise FaultSpecError("a fault needs a status, a delay, or both")
        until = self._clock.monotonic() + seconds if seconds is not None else None
        rule = FaultRule(
            verb,
            resource,
            status,
            retry_after,
            delay,
            times,
            until,
            message or f"injected fault: {status or 'delay'} for {verb} {resource}",
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def outage(self, seconds: float, *, refuse_connections: bool = False) -> None:
        """Every request answers 503 for ``seconds`` on the clock, or the listener stops for that long."""
        if refuse_connections:
            if self._listener_control is None:
                raise FaultSpecError("no listener is bound: start the server first")
            stop, start = self._listener_control
            stop()
            self._clock.call_later(seconds, start)
            return
        with self._lock:
            self._outage_until = self._clock.monotonic() + seconds

    def clear(self) -> None:
        """Remove every rule and end any 503 outage."""
        with self._lock:
            self._rules.clear()
            self._outage_until = None

    def decide(self, verb: str, resource: str) -> FaultOutcome:
        """Consult the rules for one request (consuming one use of the first matching rule)."""
        now = self._clock.monotonic()
        with self._lock:
            if self._outage_until is not None:
                if now < self._outage_until:
                    self.injected += 1
                    return FaultOutcome(
                        error=ApiError(
                            503, "ServiceUnavailable", "injected outage: the server is unavailable"
                        )
                    )
                self._outage_until = None
            self._rules = [r for r in self._rules if not _spent(r, now)]
            for rule in self._rules:
                if rule.matches(verb, resource, now):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    self.injected += 1
                    return FaultOutcome(rule.delay_s, rule.error())
        return FaultOutcome()


def _spent(rule: FaultRule, now: float) -> bool:
    return (rule.remaining is not None and rule.remaining <= 0) or (
        rule.until is not None and now >= rule.until
    )
