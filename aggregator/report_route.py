"""``POST /v1/reports`` served by a lean handler: the aggregator's hot path.

Every agent reports every interval, so at 10,000 nodes this one route is nearly all of the traffic, and
FastAPI's general machinery (solving the dependency tree, validating the parsed body in Python, encoding
the answer through ``jsonable_encoder``) cost more CPU per report than storing it. This handler does the same
work directly: the bearer token through the same authenticators, the body validated from its bytes by the
same model in pydantic's core, the answer encoded by the model itself. Its refusals go through the app's
handlers, so they look exactly as from any other route (401, 403, 422 without the input, 503).

The FastAPI route of the same path stays registered behind it so that the OpenAPI document describes the
request and the answer; requests never reach it (the router takes the first route that matches).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from aggregator.auth.dependencies import Access
from aggregator.auth.rules import require_agent_of
from aggregator.batching import ReportWriter
from aggregator.metrics import AggregatorMetrics
from core.aggregator_api import Report, ReportAck

REPORTS_PATH = "/v1/reports"

StoreReport = Callable[[Report], Awaitable[ReportAck]]


def store_report(writer: ReportWriter, metrics: AggregatorMetrics) -> StoreReport:
    """Store one report and count it: what both the lean handler and the documented route do."""

    async def store(report: Report) -> ReportAck:
        started = time.perf_counter()
        ack = await writer.submit(report)
        metrics.report_seconds.observe(time.perf_counter() - started)
        outcome = "accepted" if ack.accepted else "refused" if ack.refused else "duplicate"
        metrics.reports.labels(outcome).inc()
        return ack

    return store


def lean_report_route(access: Access, store: StoreReport) -> Route:
    """The route that really serves ``POST /v1/reports``; mount it before the documented one."""

    async def post_report(request: Request) -> Response:
        caller = await access.identify_bearer(request)
        try:
            report = Report.model_validate_json(await request.body())
        except ValidationError as exc:
            raise RequestValidationError(_as_body_errors(exc)) from None
        require_agent_of(caller.principal, report.node, "report")
        ack = await store(report)
        return Response(ack.model_dump_json(), media_type="application/json")

    return Route(REPORTS_PATH, post_report, methods=["POST"], include_in_schema=False)


def _as_body_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """The errors located as FastAPI locates a body's (under ``body``), without the input."""
    return [
        {"type": error["type"], "loc": ("body", *error["loc"]), "msg": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
