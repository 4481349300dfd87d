"""The reliability report: incidents, MTBI, MTTR, GPU-hours out of service, by model, driver, pool or node."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from aggregator.auth.principal import Role
from aggregator.reliability import GroupBy, reliability
from aggregator.routes.context import ERRORS, AppContext
from core.aggregator_api import ReliabilityReport

DEFAULT_WINDOW = timedelta(days=30)


def router(ctx: AppContext) -> APIRouter:
    """Viewers read the report (``gpuhealth report``, the fleet page's reliability view)."""
    routes = APIRouter(tags=["history"], responses=ERRORS)
    reader = [ctx.access.role(Role.VIEWER, "read the history")]

    @routes.get("/v1/reliability", response_model=ReliabilityReport, dependencies=reader)
    def get_reliability(
        since: Annotated[
            str | None, Query(max_length=64, description="30d (default), 12h or an ISO time")
        ] = None,
        by: GroupBy = "model",
    ) -> ReliabilityReport:
        """The fleet's reliability over the window, grouped by GPU model, driver, pool or node."""
        now = ctx.now()
        start = ctx.since(since) or now - DEFAULT_WINDOW
        with ctx.db.read() as conn:
            return reliability(
                conn,
                now,
                since=start,
                by=by,
                repeat_after=ctx.settings.repeat_offender_incidents,
            )

    return routes
