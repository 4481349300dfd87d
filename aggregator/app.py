"""The aggregator's HTTP API (FastAPI): ``create_app(settings)`` builds it; ``/openapi.json`` documents it."""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import structlog
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from aggregator import breaker, fleet_page, permits, queries
from aggregator.alerts import api as alerts_api
from aggregator.alerts.worker import DeliveryWorker
from aggregator.batching import ReportWriter
from aggregator.body_limit import BodyLimitMiddleware
from aggregator.metrics import AggregatorMetrics
from aggregator.settings import AggregatorSettings
from aggregator.store import diag_requests
from aggregator.store import requests as node_requests
from aggregator.store.engine import Database, open_database
from aggregator.timespec import TimeSpecError, parse_since
from gpuhealth.core.aggregator_api import (
    NODE_NAME_PATTERN,
    STALE,
    BreakerReset,
    BreakerStatus,
    DiagRequest,
    Event,
    FleetSummary,
    IncidentDetail,
    IncidentSummary,
    ManualRequest,
    NodeDetail,
    NodeRequest,
    NodeSummary,
    Permit,
    PermitRefusal,
    PermitRenewal,
    PermitRequest,
    ProblemDetail,
    Report,
    ReportAck,
)
from gpuhealth.core.clock import utc_now
from gpuhealth.core.health import NodeState

log = structlog.get_logger(__name__)

NodePath = Annotated[str, Path(pattern=NODE_NAME_PATTERN, max_length=253, description="Node name.")]
IdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ProblemDetail, "description": "Missing or wrong bearer token."},
    413: {"model": ProblemDetail, "description": "Request body larger than max_report_bytes."},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ProblemDetail, "description": "No such object."}}


@dataclass(frozen=True)
class _Context:
    """What every route needs: the store, the settings, the metrics, the clock and the auth dependency."""

    db: Database
    settings: AggregatorSettings
    metrics: AggregatorMetrics
    now: Callable[[], datetime]
    api: list[Any]
    writer: ReportWriter


_bearer = HTTPBearer(auto_error=False, description="The aggregator token (setting `token`).")


def create_app(
    settings: AggregatorSettings, *, database: Database | None = None, now: Callable[[], datetime] = utc_now
) -> FastAPI:
    """Build the app; opens (and migrates) the database unless one is given. ``now`` is the injected clock."""
    db = database or open_database(settings)
    metrics = AggregatorMetrics(db, now)
    writer = ReportWriter(db, settings, now)
    alert_worker = DeliveryWorker(db, settings, now)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        alert_worker.start()
        yield
        alert_worker.stop()
        writer.stop()
        db.dispose()

    app = FastAPI(
        title="gpuhealth aggregator",
        version="1",
        description="Fleet health, incident history, remediation permits and the fleet circuit breaker.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_report_bytes)

    async def authorized(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        if settings.allow_anonymous:
            return
        expected = (settings.token or "").encode()
        given = credentials.credentials.encode("utf-8", "replace") if credentials else b""
        if not hmac.compare_digest(given, expected):
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing or wrong bearer token",
                headers={"WWW-Authenticate": "Bearer"},
            )

    ctx = _Context(
        db=db, settings=settings, metrics=metrics, now=now, api=[Depends(authorized)], writer=writer
    )
    _register_handlers(app)
    for register in (
        _register_probes,
        _register_reports,
        _register_fleet,
        _register_requests,
        _register_history,
        _register_permits,
        _register_breaker,
    ):
        register(app, ctx)
    alerts_api.register(app, db=db, now=now, dependencies=ctx.api, responses=ERRORS)
    fleet_page.register(app, db=db, now=now, dependencies=ctx.api, responses=ERRORS)
    return app


def _register_reports(app: FastAPI, ctx: _Context) -> None:
    """Agent reports."""

    @app.post(
        "/v1/reports", response_model=ReportAck, dependencies=ctx.api, responses=ERRORS, tags=["agents"]
    )
    async def post_report(report: Report) -> ReportAck:
        """Store an agent report. Idempotent by (node, seq): a retry is acknowledged and not counted."""
        started = time.perf_counter()
        ack = await ctx.writer.submit(report)
        ctx.metrics.report_seconds.observe(time.perf_counter() - started)
        ctx.metrics.reports.labels("accepted" if ack.accepted else "duplicate").inc()
        return ack


def _register_fleet(app: FastAPI, ctx: _Context) -> None:
    """Fleet summary, node list and detail."""

    @app.get("/v1/fleet", response_model=FleetSummary, dependencies=ctx.api, responses=ERRORS, tags=["fleet"])
    def get_fleet() -> FleetSummary:
        """Nodes by state (stale shown as ``stale``), held nodes, open incidents, breaker and budget."""
        with ctx.db.read() as conn:
            return queries.fleet_summary(conn, ctx.settings, ctx.now())

    @app.get(
        "/v1/nodes", response_model=list[NodeSummary], dependencies=ctx.api, responses=ERRORS, tags=["fleet"]
    )
    def get_nodes(
        state: Annotated[str | None, Query(pattern=f"^({'|'.join([*NodeState, STALE])})$")] = None,
    ) -> list[NodeSummary]:
        """Every node, optionally only those in one shown state."""
        with ctx.db.read() as conn:
            return queries.node_list(conn, ctx.now(), state=state)

    @app.get(
        "/v1/nodes/{node}",
        response_model=NodeDetail,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND,
        tags=["fleet"],
    )
    def get_node(node: NodePath) -> NodeDetail:
        """One node: GPUs, findings, open incident, pending requests, permit, recent timeline."""
        with ctx.db.read() as conn:
            detail = queries.node_detail(conn, node, ctx.now())
        if detail is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"node {node} has never reported")
        return detail


def _register_requests(app: FastAPI, ctx: _Context) -> None:
    """Manual quarantine / release and the agent side of it."""

    @app.get(
        "/v1/nodes/{node}/requests",
        response_model=list[NodeRequest],
        dependencies=ctx.api,
        responses=ERRORS,
        tags=["agents"],
    )
    def get_pending_requests(node: NodePath) -> list[NodeRequest]:
        """Quarantine / release requests the node's agent has yet to apply."""
        with ctx.db.read() as conn:
            return node_requests.pending(conn, node)

    @app.post(
        "/v1/nodes/{node}/requests/{request_id}/ack",
        response_model=list[NodeRequest],
        dependencies=ctx.api,
        responses=ERRORS,
        tags=["agents"],
    )
    def ack_request(node: NodePath, request_id: IdPath) -> list[NodeRequest]:
        """The agent applied this request; returns what is still pending."""
        with ctx.db.write() as conn:
            node_requests.mark_applied(conn, node, [request_id], ctx.now())
            return node_requests.pending(conn, node)

    def manual(node: str, kind: str, body: ManualRequest) -> NodeRequest:
        try:
            with ctx.db.write() as conn:
                return node_requests.request_by_human(
                    conn, node, kind=kind, reason=body.reason, requested_by=body.requested_by, now=ctx.now()
                )
        except node_requests.UnknownNode as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc

    @app.post(
        "/v1/nodes/{node}/quarantine",
        response_model=NodeRequest,
        status_code=201,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND,
        tags=["on-call"],
    )
    def quarantine(node: NodePath, body: ManualRequest) -> NodeRequest:
        """Ask the node's agent to quarantine it; it stays held until released."""
        return manual(node, "quarantine", body)

    @app.post(
        "/v1/nodes/{node}/release",
        response_model=NodeRequest,
        status_code=201,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND,
        tags=["on-call"],
    )
    def release(node: NodePath, body: ManualRequest) -> NodeRequest:
        """Ask the node's agent to release it; lifts a manual or repeat-offender hold."""
        return manual(node, "release", body)

    @app.post(
        "/v1/nodes/{node}/diag",
        response_model=NodeRequest,
        status_code=201,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND,
        tags=["on-call"],
    )
    def diag(node: NodePath, body: DiagRequest) -> NodeRequest:
        """Ask the node's agent to run ``dcgmi diag -r LEVEL``; the outcome lands in the node's timeline."""
        try:
            with ctx.db.write() as conn:
                return diag_requests.request_diag(conn, node, body, ctx.now())
        except node_requests.UnknownNode as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc


def _register_history(app: FastAPI, ctx: _Context) -> None:
    """Incidents and events."""

    @app.get(
        "/v1/incidents",
        response_model=list[IncidentSummary],
        dependencies=ctx.api,
        responses=ERRORS,
        tags=["history"],
    )
    def get_incidents(
        node: Annotated[str | None, Query(pattern=NODE_NAME_PATTERN, max_length=253)] = None,
        open_only: Annotated[bool, Query(alias="open")] = False,
        since: Annotated[str | None, Query(max_length=64, description="1h, 30m, 2d or an ISO time")] = None,
    ) -> list[IncidentSummary]:
        """Incidents, newest first."""
        when = _since(since, ctx.now())
        with ctx.db.read() as conn:
            return queries.incident_list(conn, node=node, open_only=open_only, since=when)

    @app.get(
        "/v1/incidents/{incident_id}",
        response_model=IncidentDetail,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND,
        tags=["history"],
    )
    def get_incident(
        incident_id: Annotated[str, Path(max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")],
    ) -> IncidentDetail:
        """One incident with its timeline of findings and actions."""
        with ctx.db.read() as conn:
            detail = queries.incident_detail(conn, incident_id)
        if detail is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no incident {incident_id}")
        return detail

    @app.get(
        "/v1/events", response_model=list[Event], dependencies=ctx.api, responses=ERRORS, tags=["history"]
    )
    def get_events(
        node: Annotated[str | None, Query(pattern=NODE_NAME_PATTERN, max_length=253)] = None,
        since: Annotated[str | None, Query(max_length=64, description="1h, 30m, 2d or an ISO time")] = None,
        limit: Annotated[int, Query(ge=1, le=queries.MAX_EVENTS)] = 200,
    ) -> list[Event]:
        """History (state changes, findings, actions, permits, breaker, requests), oldest first."""
        when = _since(since, ctx.now())
        with ctx.db.read() as conn:
            return queries.event_list(conn, node=node, since=when, limit=limit)


def _since(spec: str | None, now: datetime) -> datetime | None:
    if spec is None:
        return None
    try:
        return parse_since(spec, now)
    except TimeSpecError as exc:
        # Shaped like FastAPI's own 422, so the documented error schema holds.
        error = {"type": "value_error", "loc": ("query", "since"), "msg": str(exc), "input": spec}
        raise RequestValidationError([error]) from exc


def _register_permits(app: FastAPI, ctx: _Context) -> None:
    """Permit request, list, renew, release."""
    refused: dict[int | str, dict[str, Any]] = {
        409: {"model": PermitRefusal, "description": "Permit refused."}
    }

    @app.post(
        "/v1/permits",
        response_model=Permit,
        status_code=201,
        dependencies=ctx.api,
        responses=ERRORS | refused,
        tags=["permits"],
    )
    def request_permit(body: PermitRequest) -> Any:
        """Grant a permit or refuse it (409) with the reason; asking again while holding one returns it."""
        with ctx.db.write() as conn:
            decision = permits.request_permit(conn, body, ctx.settings, ctx.now())
        if decision.refusal is not None:
            ctx.metrics.permit_decisions.labels(decision.refusal.code).inc()
            return JSONResponse(decision.refusal.model_dump(mode="json"), status_code=409)
        ctx.metrics.permit_decisions.labels("granted").inc()
        return decision.permit

    @app.get(
        "/v1/permits", response_model=list[Permit], dependencies=ctx.api, responses=ERRORS, tags=["permits"]
    )
    def list_permits(active: bool = True) -> list[Permit]:
        """Permits, newest first (only the active ones unless ``active=false``)."""
        with ctx.db.read() as conn:
            return permits.list_permits(conn, ctx.now(), active_only=active)

    @app.post(
        "/v1/permits/{permit_id}/renew",
        response_model=Permit,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND | {409: {"model": ProblemDetail}},
        tags=["permits"],
    )
    def renew_permit(permit_id: IdPath, body: PermitRenewal | None = None) -> Permit:
        """Extend an active permit's TTL; a lapsed one answers 409 (ask for a new one)."""
        with ctx.db.write() as conn:
            return permits.renew_permit(
                conn, permit_id, body.ttl_s if body else None, ctx.settings, ctx.now()
            )

    @app.post(
        "/v1/permits/{permit_id}/release",
        response_model=Permit,
        dependencies=ctx.api,
        responses=ERRORS | NOT_FOUND,
        tags=["permits"],
    )
    def release_permit(permit_id: IdPath) -> Permit:
        """Give the permit back (idempotent)."""
        with ctx.db.write() as conn:
            return permits.release_permit(conn, permit_id, ctx.now())


def _register_breaker(app: FastAPI, ctx: _Context) -> None:
    """Breaker status and reset."""

    @app.get(
        "/v1/breaker", response_model=BreakerStatus, dependencies=ctx.api, responses=ERRORS, tags=["breaker"]
    )
    def get_breaker() -> BreakerStatus:
        """The fleet circuit breaker: state, why it tripped, recent unhealthy transitions."""
        with ctx.db.read() as conn:
            return breaker.status(conn, ctx.settings, ctx.now())

    @app.post(
        "/v1/breaker/reset",
        response_model=BreakerStatus,
        dependencies=ctx.api,
        responses=ERRORS,
        tags=["breaker"],
    )
    def reset_breaker(body: BreakerReset) -> BreakerStatus:
        """Close the breaker (a human's decision)."""
        with ctx.db.write() as conn:
            breaker.reset(conn, requested_by=body.requested_by, reason=body.reason, now=ctx.now())
            return breaker.status(conn, ctx.settings, ctx.now())


def _register_handlers(app: FastAPI) -> None:
    @app.exception_handler(permits.PermitNotFound)
    async def _not_found(_request: Request, exc: permits.PermitNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(permits.PermitNotActive)
    async def _not_active(_request: Request, exc: permits.PermitNotActive) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(DBAPIError)
    async def _database_down(_request: Request, exc: DBAPIError) -> JSONResponse:
        # Not a bug of the request: the store is unavailable. Agents retry; the message names no secrets.
        log.error("database error", error=type(exc.orig).__name__ if exc.orig else type(exc).__name__)
        return JSONResponse({"detail": "database unavailable"}, status_code=503)


def _register_probes(app: FastAPI, ctx: _Context) -> None:
    """/healthz, /readyz, /metrics."""

    @app.get("/healthz", tags=["probes"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"], responses={503: {"model": ProblemDetail}})
    def readyz() -> Any:
        """Readiness: the database answers."""
        try:
            with ctx.db.read() as conn:
                conn.execute(text("SELECT 1"))
        except DBAPIError:
            return JSONResponse({"detail": "database unavailable"}, status_code=503)
        return {"status": "ready"}

    @app.get("/metrics", tags=["probes"], response_class=Response)
    def get_metrics() -> Response:
        """Prometheus metrics."""
        return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
