"""Probes and metrics: ``/healthz``, ``/readyz``, ``/metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from aggregator.routes.context import ERRORS, AppContext
from core.aggregator_api import ProblemDetail


def router(ctx: AppContext) -> APIRouter:
    """Liveness and readiness need no token; metrics need the metrics token or a viewer."""
    routes = APIRouter(tags=["probes"])

    @routes.get("/healthz")
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @routes.get("/readyz", responses={503: {"model": ProblemDetail}})
    def readyz() -> Any:
        """Readiness: the database answers."""
        try:
            with ctx.db.read() as conn:
                conn.execute(text("SELECT 1"))
        except DBAPIError:
            return JSONResponse({"detail": "database unavailable"}, status_code=503)
        return {"status": "ready"}

    @routes.get(
        "/metrics",
        response_class=Response,
        dependencies=[ctx.access.metrics_reader()],
        responses={401: ERRORS[401], 403: ERRORS[403]},
    )
    def get_metrics() -> Response:
        """Prometheus metrics (the metrics token, or the viewer role)."""
        return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return routes
