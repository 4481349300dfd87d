"""The fleet circuit breaker: status and reset."""

from __future__ import annotations

from fastapi import APIRouter

from aggregator import breaker
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.routes.context import ERRORS, AppContext
from core.aggregator_api import BreakerReset, BreakerStatus


def router(ctx: AppContext) -> APIRouter:
    """Viewers read the breaker; an admin resets it."""
    routes = APIRouter(tags=["breaker"], responses=ERRORS)
    admin_resets = ctx.access.role(Role.ADMIN, "reset the breaker")

    @routes.get(
        "/v1/breaker",
        response_model=BreakerStatus,
        dependencies=[ctx.access.role(Role.VIEWER, "read the breaker")],
    )
    def get_breaker() -> BreakerStatus:
        """The fleet circuit breaker: state, why it tripped, recent unhealthy transitions."""
        with ctx.db.read() as conn:
            return breaker.status(conn, ctx.settings, ctx.now())

    @routes.post("/v1/breaker/reset", response_model=BreakerStatus)
    def reset_breaker(body: BreakerReset, caller: Caller = admin_resets) -> BreakerStatus:
        """Close the breaker (admin; recorded with the caller's name)."""
        with ctx.db.write() as conn:
            breaker.reset(conn, requested_by=caller.principal.name, reason=body.reason, now=ctx.now())
            ctx.audit(conn, caller, "breaker_reset", None, {"reason": body.reason})
            return breaker.status(conn, ctx.settings, ctx.now())

    return routes
