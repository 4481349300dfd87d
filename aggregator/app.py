"""The aggregator's HTTP API (FastAPI): ``create_app(settings)`` builds it; ``/openapi.json`` documents it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import structlog
from fastapi import FastAPI, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from aggregator import breaker, fleet_page, permits, queries
from aggregator.alerts import api as alerts_api
from aggregator.alerts.worker import DeliveryWorker
from aggregator.auth.chain import Caller, build_chain
from aggregator.auth.dependencies import Access
from aggregator.auth.principal import Role
from aggregator.auth.rules import Forbidden, require_agent_of, require_agent_or_role
from aggregator.auth.unauthorized_log import UnauthorizedLog
from aggregator.batching import ReportWriter
from aggregator.body_limit import BodyLimitMiddleware
from aggregator.forget import forget_node
from aggregator.metrics import AggregatorMetrics
from aggregator.pagination import MAX_TOKEN_CHARS, announce_next, decode_token
from aggregator.remediator import DrainFactory, build_remediator
from aggregator.report_route import REPORTS_PATH, lean_report_route, store_report
from aggregator.retention import Pruner
from aggregator.settings import AggregatorSettings
from aggregator.store import audit, diag_requests, drains
from aggregator.store import requests as node_requests
from aggregator.store.engine import Database, open_database
from aggregator.timespec import TimeSpecError, parse_since
from core.aggregator_api import (
    NODE_NAME_PATTERN,
    STALE,
    AuditEntry,
    BreakerReset,
    BreakerStatus,
    CentralDrain,
    DiagRequest,
    DrainOrder,
    Event,
    FleetSummary,
    IncidentDetail,
    IncidentSummary,
    ManualRequest,
    NodeDetail,
    NodeForgotten,
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
from core.clock import utc_now
from core.health import NodeState

log = structlog.get_logger(__name__)

NodePath = Annotated[str, Path(pattern=NODE_NAME_PATTERN, max_length=253, description="Node name.")]
IdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ProblemDetail, "description": "Missing or wrong bearer token."},
    403: {"model": ProblemDetail, "description": "The caller may not do this; the detail names the rule."},
    413: {"model": ProblemDetail, "description": "Request body larger than max_report_bytes."},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ProblemDetail, "description": "No such object."}}


@dataclass(frozen=True)
class _Context:
    """What every route needs: the store, the settings, the metrics, the clock and who may call what."""

    db: Database
    settings: AggregatorSettings
    metrics: AggregatorMetrics
    now: Callable[[], datetime]
    access: Access
    writer: ReportWriter

    def audit(
        self,
        conn: Any,
        caller: Caller,
        action: str,
        target: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Record a mutating call in the audit log, in the transaction of the change."""
        principal = caller.principal
        audit.record(
            conn,
            at=self.now(),
            actor=principal.name,
            role=principal.role.value,
            method=principal.method.value,
            client=caller.client,
            action=action,
            target=target,
            details=details,
        )


def create_app(
    settings: AggregatorSettings,
    *,
    database: Database | None = None,
    now: Callable[[], datetime] = utc_now,
    drain_for: DrainFactory | None = None,
) -> FastAPI:
    """Build the app; opens (and migrates) the database unless one is given. ``now`` is the injected clock.
    ``drain_for`` runs the central remediator with these drains (the demo's emulator); without it, the
    ``remediator`` settings say whether one runs and where.

    Raises TokenFileError (a SettingsError) when the token file cannot be loaded, and ExecutorSetupError when
    the remediator's orchestrator configuration cannot be loaded."""
    metrics_token = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    access = Access(build_chain(settings), metrics_token=metrics_token)
    db = database or open_database(settings)
    metrics = AggregatorMetrics(db, now)
    writer = ReportWriter(db, settings, now)
    alert_worker = DeliveryWorker(db, settings, now)
    pruner = Pruner(db, settings, now)
    remediator = build_remediator(db, settings, now, drain_for)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        alert_worker.start()
        pruner.start()
        if remediator is not None:
            remediator.start()
        yield
        if remediator is not None:
            remediator.stop()
        alert_worker.stop()
        pruner.stop()
        writer.stop()
        db.dispose()

    app = FastAPI(
        title="gpuhealth aggregator",
        version="1",
        description="Fleet health, incident history, remediation permits and the fleet circuit breaker.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_report_bytes)
    app.state.remediator = remediator
    ctx = _Context(db=db, settings=settings, metrics=metrics, now=now, access=access, writer=writer)
    _register_handlers(app, UnauthorizedLog(event="request refused: forbidden"))
    for register in (
        _register_probes,
        _register_reports,
        _register_fleet,
        _register_requests,
        _register_history,
        _register_permits,
        _register_drains,
        _register_node_drain,
        _register_breaker,
    ):
        register(app, ctx)
    alerts_api.register(app, db=db, now=now, access=access, audit=ctx.audit, responses=ERRORS)
    fleet_page.register(app, db=db, now=now, access=access, responses=ERRORS)
    return app


def _register_reports(app: FastAPI, ctx: _Context) -> None:
    """Agent reports: served by the lean route (aggregator/report_route.py), documented by this one."""
    authenticated = ctx.access.authenticated()
    store = store_report(ctx.writer, ctx.metrics)
    app.router.routes.append(lean_report_route(ctx.access, store))

    @app.post(REPORTS_PATH, response_model=ReportAck, responses=ERRORS, tags=["agents"])
    async def post_report(report: Report, caller: Caller = authenticated) -> ReportAck:
        """Store an agent report (the node's own agent only). Idempotent by (node, epoch, seq): a retry is
        acknowledged and not counted."""
        require_agent_of(caller.principal, report.node, "report")
        return await store(report)


def _register_fleet(app: FastAPI, ctx: _Context) -> None:
    """Fleet summary, node list and detail; forgetting a node."""
    admin_forgets = ctx.access.role(Role.ADMIN, "forget a node")
    reader = [ctx.access.role(Role.VIEWER, "read the fleet")]

    @app.get("/v1/fleet", response_model=FleetSummary, dependencies=reader, responses=ERRORS, tags=["fleet"])
    def get_fleet() -> FleetSummary:
        """Nodes by state (stale shown as ``stale``), held nodes, open incidents, breaker and budget."""
        with ctx.db.read() as conn:
            return queries.fleet_summary(conn, ctx.settings, ctx.now())

    @app.get(
        "/v1/nodes", response_model=list[NodeSummary], dependencies=reader, responses=ERRORS, tags=["fleet"]
    )
    def get_nodes(
        request: Request,
        response: Response,
        state: Annotated[str | None, Query(pattern=f"^({'|'.join([*NodeState, STALE])})$")] = None,
        limit: Annotated[int, Query(ge=1, le=queries.MAX_NODES_PAGE)] = queries.MAX_NODES_PAGE,
        continue_token: Annotated[str | None, Query(alias="continue", max_length=MAX_TOKEN_CHARS)] = None,
    ) -> list[NodeSummary]:
        """Nodes by name, optionally only those in one shown state; a full page announces the next one in
        its ``Link`` header (``rel="next"``)."""
        position = decode_token(continue_token)
        after = str(position[0]) if position else None
        with ctx.db.read() as conn:
            page = queries.node_list(conn, ctx.now(), state=state, limit=limit, after=after)
        announce_next(request, response, [page[-1].name] if len(page) == limit else None)
        return page

    authenticated = ctx.access.authenticated()

    @app.get("/v1/nodes/{node}", response_model=NodeDetail, responses=ERRORS | NOT_FOUND, tags=["fleet"])
    def get_node(node: NodePath, caller: Caller = authenticated) -> NodeDetail:
        """One node: GPUs, findings, open incident, pending requests, permit, recent timeline (a viewer, or
        the node's own agent, which reads its record back when it lost its state file)."""
        require_agent_or_role(caller.principal, node, Role.VIEWER, "read node records")
        with ctx.db.read() as conn:
            detail = queries.node_detail(conn, node, ctx.now())
        if detail is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"node {node} has never reported")
        return detail

    @app.delete(
        "/v1/nodes/{node}", response_model=NodeForgotten, responses=ERRORS | NOT_FOUND, tags=["fleet"]
    )
    def forget(node: NodePath, caller: Caller = admin_forgets) -> Any:
        """Forget a node (admin): its row, incidents, permits and requests; it leaves the budget and the
        breaker's count. Its history stays. Should it report again it starts over."""
        with ctx.db.write() as conn:
            removed = forget_node(conn, node, by=caller.principal.name, now=ctx.now())
            if removed is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"node {node} is not known")
            ctx.audit(conn, caller, "forget_node", node, removed.model_dump(mode="json"))
        return removed


def _register_requests(app: FastAPI, ctx: _Context) -> None:
    """Manual quarantine / release and the agent side of it."""
    authenticated = ctx.access.authenticated()
    operator_quarantines = ctx.access.role(Role.OPERATOR, "quarantine a node")
    operator_releases = ctx.access.role(Role.OPERATOR, "release a node")
    operator_diags = ctx.access.role(Role.OPERATOR, "run diagnostics")

    @app.get("/v1/nodes/{node}/requests", response_model=list[NodeRequest], responses=ERRORS, tags=["agents"])
    def get_pending_requests(node: NodePath, caller: Caller = authenticated) -> list[NodeRequest]:
        """Quarantine / release requests the node's agent has yet to apply (its agent, or a viewer)."""
        require_agent_or_role(caller.principal, node, Role.VIEWER, "read requests")
        with ctx.db.read() as conn:
            return node_requests.pending(conn, node)

    @app.post(
        "/v1/nodes/{node}/requests/{request_id}/ack",
        response_model=list[NodeRequest],
        responses=ERRORS,
        tags=["agents"],
    )
    def ack_request(node: NodePath, request_id: IdPath, caller: Caller = authenticated) -> list[NodeRequest]:
        """The agent applied this request; returns what is still pending (the node's own agent only)."""
        require_agent_of(caller.principal, node, "acknowledge requests")
        with ctx.db.write() as conn:
            node_requests.mark_applied(conn, node, [request_id], ctx.now())
            ctx.audit(conn, caller, "ack_request", node, {"request": request_id})
            return node_requests.pending(conn, node)

    def manual(node: str, kind: str, body: ManualRequest, caller: Caller) -> NodeRequest:
        try:
            with ctx.db.write() as conn:
                request = node_requests.request_by_human(
                    conn,
                    node,
                    kind=kind,
                    reason=body.reason,
                    requested_by=caller.principal.name,
                    now=ctx.now(),
                )
                ctx.audit(conn, caller, kind, node, {"reason": body.reason, "request": request.id})
                return request
        except node_requests.UnknownNode as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc

    @app.post(
        "/v1/nodes/{node}/quarantine",
        response_model=NodeRequest,
        status_code=201,
        responses=ERRORS | NOT_FOUND,
        tags=["on-call"],
    )
    def quarantine(
        node: NodePath,
        body: ManualRequest,
        caller: Caller = operator_quarantines,
    ) -> NodeRequest:
        """Ask the node's agent to quarantine it (operator); it stays held until released."""
        return manual(node, "quarantine", body, caller)

    @app.post(
        "/v1/nodes/{node}/release",
        response_model=NodeRequest,
        status_code=201,
        responses=ERRORS | NOT_FOUND,
        tags=["on-call"],
    )
    def release(
        node: NodePath,
        body: ManualRequest,
        caller: Caller = operator_releases,
    ) -> NodeRequest:
        """Ask the node's agent to release it (operator); lifts a manual or repeat-offender hold."""
        return manual(node, "release", body, caller)

    @app.post(
        "/v1/nodes/{node}/diag",
        response_model=NodeRequest,
        status_code=201,
        responses=ERRORS | NOT_FOUND,
        tags=["on-call"],
    )
    def diag(
        node: NodePath,
        body: DiagRequest,
        caller: Caller = operator_diags,
    ) -> NodeRequest:
        """Ask the node's agent to run ``dcgmi diag -r LEVEL`` (operator); the outcome lands in the node's
        timeline."""
        try:
            with ctx.db.write() as conn:
                request = diag_requests.request_diag(
                    conn, node, body, ctx.now(), requested_by=caller.principal.name
                )
                ctx.audit(conn, caller, "diag", node, {"level": body.level, "force": body.force})
                return request
        except node_requests.UnknownNode as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc


def _register_history(app: FastAPI, ctx: _Context) -> None:
    """Incidents, events and the audit log."""
    reader = [ctx.access.role(Role.VIEWER, "read the history")]

    @app.get(
        "/v1/incidents",
        response_model=list[IncidentSummary],
        dependencies=reader,
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
        dependencies=reader,
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
        "/v1/events", response_model=list[Event], dependencies=reader, responses=ERRORS, tags=["history"]
    )
    def get_events(
        request: Request,
        response: Response,
        *,
        node: Annotated[str | None, Query(pattern=NODE_NAME_PATTERN, max_length=253)] = None,
        since: Annotated[str | None, Query(max_length=64, description="1h, 30m, 2d or an ISO time")] = None,
        limit: Annotated[int, Query(ge=1, le=queries.MAX_EVENTS)] = 200,
        continue_token: Annotated[str | None, Query(alias="continue", max_length=MAX_TOKEN_CHARS)] = None,
    ) -> list[Event]:
        """History (state changes, findings, actions, permits, breaker, requests): the newest ``limit``
        events, oldest first; when there are older ones, the ``Link`` header (``rel="next"``) names the page
        before them."""
        when = _since(since, ctx.now())
        before = _event_position(decode_token(continue_token))
        with ctx.db.read() as conn:
            page = queries.event_list(conn, node=node, since=when, limit=limit, before=before)
        oldest = [page[0].at.isoformat(), page[0].id] if len(page) == limit else None
        announce_next(request, response, oldest)
        return page

    @app.get(
        "/v1/audit",
        response_model=list[AuditEntry],
        dependencies=[ctx.access.role(Role.OPERATOR, "read the audit log")],
        responses=ERRORS,
        tags=["history"],
    )
    def get_audit(
        since: Annotated[str | None, Query(max_length=64, description="1h, 30m, 2d or an ISO time")] = None,
        actor: Annotated[str | None, Query(max_length=128)] = None,
        limit: Annotated[int, Query(ge=1, le=audit.MAX_LISTED)] = 200,
    ) -> list[AuditEntry]:
        """Mutating calls (operator): who, role, what, target, when, from which address; oldest first."""
        when = _since(since, ctx.now())
        with ctx.db.read() as conn:
            return audit.entries(conn, since=when, actor=actor, limit=limit)


def _event_position(position: list[Any] | None) -> tuple[datetime, int] | None:
    """An event's (time, id) from a continue token of ``/v1/events``."""
    if position is None:
        return None
    try:
        return datetime.fromisoformat(str(position[0])), int(position[1])
    except (ValueError, IndexError, TypeError) as exc:
        error = {
            "type": "value_error",
            "loc": ("query", "continue"),
            "msg": "not an events token",
            "input": "",
        }
        raise RequestValidationError([error]) from exc


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
    authenticated = ctx.access.authenticated()
    refused: dict[int | str, dict[str, Any]] = {
        409: {"model": PermitRefusal, "description": "Permit refused."}
    }

    @app.post(
        "/v1/permits", response_model=Permit, status_code=201, responses=ERRORS | refused, tags=["permits"]
    )
    def request_permit(body: PermitRequest, caller: Caller = authenticated) -> Any:
        """Grant a permit or refuse it (409) with the reason; asking again while holding one returns it.
        The node's own agent only."""
        require_agent_of(caller.principal, body.node, "request permits")
        with ctx.db.write() as conn:
            decision = permits.request_permit(conn, body, ctx.settings, ctx.now())
            if decision.permit is not None:
                ctx.audit(conn, caller, "permit_request", body.node, {"permit": decision.permit.id})
        if decision.refusal is not None:
            ctx.metrics.permit_decisions.labels(decision.refusal.code).inc()
            return JSONResponse(decision.refusal.model_dump(mode="json"), status_code=409)
        ctx.metrics.permit_decisions.labels("granted").inc()
        return decision.permit

    @app.get(
        "/v1/permits",
        response_model=list[Permit],
        dependencies=[ctx.access.role(Role.VIEWER, "list permits")],
        responses=ERRORS,
        tags=["permits"],
    )
    def list_permits(active: bool = True) -> list[Permit]:
        """Permits, newest first (only the active ones unless ``active=false``)."""
        with ctx.db.read() as conn:
            return permits.list_permits(conn, ctx.now(), active_only=active)

    @app.post(
        "/v1/permits/{permit_id}/renew",
        response_model=Permit,
        responses=ERRORS | NOT_FOUND | {409: {"model": ProblemDetail}},
        tags=["permits"],
    )
    def renew_permit(
        permit_id: IdPath,
        caller: Caller = authenticated,
        body: PermitRenewal | None = None,
    ) -> Permit:
        """Extend an active permit's TTL (its node's agent only); a lapsed one answers 409: ask anew."""
        with ctx.db.write() as conn:
            _require_permit_holder(conn, caller, permit_id, "renew permits")
            renewed = permits.renew_permit(
                conn, permit_id, body.ttl_s if body else None, ctx.settings, ctx.now()
            )
            ctx.audit(conn, caller, "permit_renew", renewed.node, {"permit": permit_id})
            return renewed

    @app.post(
        "/v1/permits/{permit_id}/release",
        response_model=Permit,
        responses=ERRORS | NOT_FOUND,
        tags=["permits"],
    )
    def release_permit(permit_id: IdPath, caller: Caller = authenticated) -> Permit:
        """Give the permit back (idempotent). Its node's agent only."""
        with ctx.db.write() as conn:
            _require_permit_holder(conn, caller, permit_id, "release permits")
            released = permits.release_permit(conn, permit_id, ctx.now())
            ctx.audit(conn, caller, "permit_release", released.node, {"permit": permit_id})
            return released


def _register_drains(app: FastAPI, ctx: _Context) -> None:
    """Central drains: the node's agent orders the drain of its node under its permit, and reads it back."""
    authenticated = ctx.access.authenticated()
    conflict: dict[int | str, dict[str, Any]] = {409: {"model": ProblemDetail}}

    @app.post(
        "/v1/permits/{permit_id}/drain",
        response_model=CentralDrain,
        status_code=202,
        responses=ERRORS | NOT_FOUND | conflict,
        tags=["permits"],
    )
    def order_drain(permit_id: IdPath, body: DrainOrder, caller: Caller = authenticated) -> CentralDrain:
        """Drain the permit's node for its incident, then requeue its jobs: the central remediator does it
        with its own credentials (its node's agent only; the permit must be active; idempotent)."""
        with ctx.db.write() as conn:
            _require_permit_holder(conn, caller, permit_id, "order drains")
            try:
                ordered = drains.order(conn, permit_id, body.deadline_s, ctx.now())
            except drains.DrainOrderRefused as exc:
                raise permits.PermitNotActive(str(exc)) from exc
            ctx.audit(conn, caller, "drain_order", ordered.node, {"permit": permit_id})
        if app.state.remediator is None and ordered.phase == "requested":
            # Another aggregator on the same database may run one; if none does, the order waits (and the
            # node's agent keeps its permit) until someone sets remediator.orchestrator.
            log.warning("drain_ordered_without_remediator", node=ordered.node, permit=permit_id)
        return ordered

    @app.get(
        "/v1/permits/{permit_id}/drain",
        response_model=CentralDrain,
        responses=ERRORS | NOT_FOUND,
        tags=["permits"],
    )
    def get_drain(permit_id: IdPath, caller: Caller = authenticated) -> CentralDrain:
        """Where the central drain of a permit stands, with its news (its node's agent, or a viewer)."""
        with ctx.db.read() as conn:
            node = permits.node_of(conn, permit_id)
            if node is None:
                raise permits.PermitNotFound(f"no permit {permit_id}")
            require_agent_or_role(caller.principal, node, Role.VIEWER, "read drains")
            found = drains.get(conn, permit_id)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no drain was ordered under permit {permit_id}")
        return found


def _register_node_drain(app: FastAPI, ctx: _Context) -> None:
    """A node's latest central drain: how a restarted agent finds the drain it ordered before."""
    authenticated = ctx.access.authenticated()

    @app.get(
        "/v1/nodes/{node}/drain", response_model=CentralDrain, responses=ERRORS | NOT_FOUND, tags=["agents"]
    )
    def latest_drain(node: NodePath, caller: Caller = authenticated) -> CentralDrain:
        """The node's most recent central drain, with its news (its agent, or a viewer)."""
        require_agent_or_role(caller.principal, node, Role.VIEWER, "read drains")
        with ctx.db.read() as conn:
            found = drains.latest_of(conn, node)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no drain was ever ordered for node {node}")
        return found


def _require_permit_holder(conn: Any, caller: Caller, permit_id: int, what: str) -> None:
    """Refuse (403) unless the caller is the agent of the node holding the permit; 404 if there is none."""
    principal = caller.principal
    if principal.role is not Role.AGENT and not principal.any_node:
        raise Forbidden(f"{principal.describe()} may not {what}: only the node's own agent may")
    node = permits.node_of(conn, permit_id)
    if node is None:
        raise permits.PermitNotFound(f"no permit {permit_id}")
    if not principal.may_act_for(node):
        raise Forbidden(
            f"{principal.describe()} may only {what} of its own node; permit {permit_id} is {node}'s"
        )


def _register_breaker(app: FastAPI, ctx: _Context) -> None:
    """Breaker status and reset."""
    admin_resets = ctx.access.role(Role.ADMIN, "reset the breaker")

    @app.get(
        "/v1/breaker",
        response_model=BreakerStatus,
        dependencies=[ctx.access.role(Role.VIEWER, "read the breaker")],
        responses=ERRORS,
        tags=["breaker"],
    )
    def get_breaker() -> BreakerStatus:
        """The fleet circuit breaker: state, why it tripped, recent unhealthy transitions."""
        with ctx.db.read() as conn:
            return breaker.status(conn, ctx.settings, ctx.now())

    @app.post("/v1/breaker/reset", response_model=BreakerStatus, responses=ERRORS, tags=["breaker"])
    def reset_breaker(body: BreakerReset, caller: Caller = admin_resets) -> BreakerStatus:
        """Close the breaker (admin; recorded with the caller's name)."""
        with ctx.db.write() as conn:
            breaker.reset(conn, requested_by=caller.principal.name, reason=body.reason, now=ctx.now())
            ctx.audit(conn, caller, "breaker_reset", None, {"reason": body.reason})
            return breaker.status(conn, ctx.settings, ctx.now())


def _register_handlers(app: FastAPI, forbidden_log: UnauthorizedLog) -> None:
    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> JSONResponse:
        forbidden_log.refused(request.client.host if request.client else "unknown", str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=403)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's 422 shape, without echoing the input back: it may be text no encoder can write (a lone
        # surrogate), or megabytes a caller sent; the location and the message say what is wrong.
        errors = [
            {"type": str(error.get("type", "value_error")), "loc": list(error.get("loc", ())),
             "msg": str(error.get("msg", "invalid"))}
            for error in exc.errors()
        ]  # fmt: skip
        return JSONResponse({"detail": errors}, status_code=422)

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

    @app.get(
        "/metrics",
        tags=["probes"],
        response_class=Response,
        dependencies=[ctx.access.metrics_reader()],
        responses={401: ERRORS[401], 403: ERRORS[403]},
    )
    def get_metrics() -> Response:
        """Prometheus metrics (the metrics token, or the viewer role)."""
        return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
