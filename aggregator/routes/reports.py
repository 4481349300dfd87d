"""``POST /v1/reports``: served by the lean route (aggregator/report_route.py), documented by this one."""

from __future__ import annotations

from fastapi import APIRouter

from aggregator.auth.chain import Caller
from aggregator.auth.rules import require_agent_of
from aggregator.report_route import REPORTS_PATH, lean_report_route, store_report
from aggregator.routes.context import ERRORS, AppContext
from core.aggregator_api import Report, ReportAck


def router(ctx: AppContext) -> APIRouter:
    """The lean route first (the router takes the first route that matches), then the documented one."""
    routes = APIRouter(tags=["agents"], responses=ERRORS)
    store = store_report(ctx.writer, ctx.metrics)
    routes.routes.append(lean_report_route(ctx.access, store))
    authenticated = ctx.access.authenticated()

    @routes.post(REPORTS_PATH, response_model=ReportAck)
    async def post_report(report: Report, caller: Caller = authenticated) -> ReportAck:
        """Store an agent report (the node's own agent only). Idempotent by (node, epoch, seq): a retry is
        acknowledged and not counted."""
        require_agent_of(caller.principal, report.node, "report")
        return await store(report)

    return routes
