"""The permit gate: anything beyond mark + taint (drain, requeue, reset, reboot) waits for the aggregator.

Safety rule (docs/agent.md, "The aggregator link"): with no aggregator configured, the aggregator
unreachable, or the permit refused (breaker tripped, budget exhausted, cooldown), the agent keeps the node
marked and tainted and does nothing more; it asks again later, at most once every ``retry_s`` so a fleet in
trouble does not hammer the aggregator. A held permit is renewed before its TTL runs out and released when
its incident closes, so the budget frees itself as soon as the node is back (and, should the agent die,
when the TTL lapses).

TTLs are measured on the agent's monotonic clock from the moment of the grant (the aggregator's clock may
differ from the node's); the renewal happens once ``renew_fraction`` of the TTL has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from agent.uplink.client import AggregatorClient, AggregatorError, PermitLapsed, PermitRefused
from core.aggregator_api import Permit
from core.clock import Clock
from core.findings import Action
from core.steps import RequestPermit, Step

log = structlog.get_logger(__name__)

PURPOSES: dict[str, Action] = {
    "drain": Action.DRAIN_AND_RESET,
    "requeue": Action.DRAIN_AND_RESET,
    "reset": Action.RESET_GPU,
    "reboot": Action.REBOOT,
    **{action.value: action for action in Action if action.takes_node_out_of_service},
}
"""What a permit may be asked for: the plan's step names and the out-of-service actions themselves."""


class PermitPurposeError(ValueError):
    """A permit was asked for something that is not a remediation (a bug in the caller)."""


@dataclass
class _Held:
    permit: Permit
    renew_at: float  # monotonic seconds
    expires_at: float  # monotonic seconds


class PermitGate:
    """Asks the aggregator for permits for one node; ``client=None`` means no aggregator: never granted."""

    def __init__(
        self,
        node: str,
        client: AggregatorClient | None,
        *,
        clock: Clock,
        retry_s: float = 60.0,
        ttl_s: float | None = None,
        renew_fraction: float = 0.5,
    ) -> None:
        self._node = node
        self._client = client
        self._clock = clock
        self._retry_s = retry_s
        self._ttl_s = ttl_s
        self._renew_fraction = renew_fraction
        self._held: _Held | None = None
        self._next_ask = float("-inf")
        self._soon: float | None = None
        self._log = log.bind(node=node)

    def wake_in(self) -> float | None:
        """Seconds until the aggregator said a refused permit may be granted (a settling node), or None.

        The loop wakes then instead of after its whole interval, so a node waiting out the settle time is
        drained when the wait ends, not a polling interval later."""
        if self._soon is None or self._held is not None:
            return None
        left = self._soon - self._clock.monotonic()
        if left > 0:
            return left
        # Past, and no pass has asked since (an ask resets or clears it): the aggregator counts the settle
        # from the report that said the node turned unhealthy, which arrives after the pass's first ask, so
        # the ask at the said time may be refused once more with a fraction of a second left, a time the
        # pass's end is already past. Due now, once: a pass that does not ask leaves it cleared.
        self._soon = None
        return 0.0

    @property
    def held(self) -> Permit | None:
        """The permit held now, if any."""
        return self._held.permit if self._held is not None else None

    def acquire(self, purpose: str, incident_id: str, action: Action | None = None) -> Permit | None:
        """A permit for ``purpose`` during ``incident_id``, or None (the reason is logged; ask again later).

        Raises PermitPurposeError when ``purpose`` is not a remediation.
        """
        meant = PURPOSES.get(purpose)
        if meant is None:
            raise PermitPurposeError(f"no permit exists for {purpose!r}; expected one of {sorted(PURPOSES)}")
        if action is None or not action.takes_node_out_of_service:
            action = meant
        if self._client is None:
            self._log.info("permit_unavailable", reason="no aggregator configured", purpose=purpose)
            return None
        held = self._held
        if held is not None and held.permit.incident_id == incident_id:
            return self._keep(held)
        if held is not None:
            self.release()  # a permit for another incident is not this one's
        return self._ask(action, purpose, incident_id)

    def observe_incident(self, incident_id: str | None) -> None:
        """Release the held permit once its incident is no longer the open one."""
        if self._held is not None and self._held.permit.incident_id != incident_id:
            self.release()

    def release(self) -> None:
        """Give the held permit back (a failure is logged: the TTL frees it anyway)."""
        held, self._held = self._held, None
        if held is None or self._client is None:
            return
        try:
            self._client.release_permit(held.permit.id)
            self._log.info("permit_released", permit=held.permit.id)
        except AggregatorError as exc:
            self._log.warning("permit_release_failed", permit=held.permit.id, error=str(exc))

    # -- internals ---------------------------------------------------------------------------------------

    def _ask(self, action: Action, purpose: str, incident_id: str) -> Permit | None:
        assert self._client is not None
        now = self._clock.monotonic()
        if now < self._next_ask:
            self._log.debug("permit_not_asked_yet", retry_in_s=round(self._next_ask - now, 1))
            return None
        try:
            permit = self._client.request_permit(
                self._node, action, incident_id=incident_id, ttl_s=self._ttl_s
            )
        except PermitRefused as exc:
            self._denied("refused", exc, purpose, code=exc.code, retry_after_s=exc.retry_after_s)
            return None
        except AggregatorError as exc:
            self._denied("aggregator_unavailable", exc, purpose, code=type(exc).__name__)
            return None
        self._soon = None
        self._hold(permit)
        self._log.info("permit_granted", permit=permit.id, purpose=purpose, incident=incident_id)
        return permit

    def _keep(self, held: _Held) -> Permit | None:
        assert self._client is not None
        now = self._clock.monotonic()
        if now < held.renew_at:
            return held.permit
        try:
            permit = self._client.renew_permit(held.permit.id, ttl_s=self._ttl_s)
        except PermitLapsed:
            self._log.info("permit_lapsed", permit=held.permit.id)
            self._held = None
            return self._ask(held.permit.action, "renewal", held.permit.incident_id or "")
        except AggregatorError as exc:
            if now < held.expires_at:
                self._log.warning("permit_renew_failed", permit=held.permit.id, error=str(exc))
                return held.permit  # still valid on the aggregator's books until it expires
            self._held = None
            self._denied("aggregator_unavailable", exc, "renewal", code=type(exc).__name__)
            return None
        self._hold(permit)
        return permit

    def _hold(self, permit: Permit) -> None:
        ttl = max(0.0, (permit.expires_at - permit.granted_at).total_seconds())
        now = self._clock.monotonic()
        self._held = _Held(permit=permit, renew_at=now + ttl * self._renew_fraction, expires_at=now + ttl)

    def _denied(
        self, why: str, exc: Exception, purpose: str, *, code: str, retry_after_s: float | None = None
    ) -> None:
        # A settling node may ask again sooner than the usual retry: the aggregator says when.
        wait = self._retry_s if retry_after_s is None else min(self._retry_s, retry_after_s)
        self._next_ask = self._clock.monotonic() + wait
        self._soon = self._next_ask if retry_after_s is not None else None
        self._log.warning("permit_denied", why=why, code=code, purpose=purpose, error=str(exc))


def split_at_first_permit(steps: Sequence[Step]) -> tuple[list[Step], list[Step]]:
    """The steps before the first ``RequestPermit`` (mark, taint: never gated) and the rest (from it on)."""
    for position, step in enumerate(steps):
        if isinstance(step, RequestPermit):
            return list(steps[:position]), list(steps[position:])
    return list(steps), []


def withhold_unpermitted(steps: Sequence[Step], gate: PermitGate | None) -> tuple[list[Step], list[str]]:
    """The steps to execute: a ``RequestPermit`` guards every step after it, so when the gate grants no
    permit those steps are withheld (mark and taint, planned before it, still go). The ``RequestPermit``
    step itself is the gate's business, never the executor's. Returns the steps and notes for the log."""
    allowed: list[Step] = []
    for position, step in enumerate(steps):
        if not isinstance(step, RequestPermit):
            allowed.append(step)
            continue
        permit = gate.acquire(step.purpose, step.incident_id, step.action) if gate is not None else None
        if permit is None:
            withheld = len(steps) - position - 1
            return allowed, [f"no permit for {step.purpose} ({step.incident_id}): withheld {withheld} steps"]
    return allowed, []
