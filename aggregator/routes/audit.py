"""The audit log of mutating calls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from aggregator.auth.principal import Role
from aggregator.routes.context import ERRORS, AppContext
from aggregator.store import audit
from core.aggregator_api import AuditEntry


def router(ctx: AppContext) -> APIRouter:
    """Operators read the audit log."""
    routes = APIRouter(
        tags=["history"],
        responses=ERRORS,
        dependencies=[ctx.access.role(Role.OPERATOR, "read the audit log")],
    )

    @routes.get("/v1/audit", response_model=list[AuditEntry])
    def get_audit(
        since: Annotated[str | None, Query(max_length=64, description="1h, 30m, 2d or an ISO time")] = None,
        actor: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=audit.MAX_LISTED)] = 200,
    ) -> list[AuditEntry]:
        """Mutating calls (operator): who, role, what, target, when, from which address; oldest first."""
        when = ctx.since(since)
        with ctx.db.read() as conn:
            return audit.entries(conn, since=when, actor=actor, limit=limit)

    return routes
