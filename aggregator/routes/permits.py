"""Remediation permits: request, list, renew, release."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from aggregator import permits
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.auth.rules import Forbidden, require_agent_of
from aggregator.routes.context import CONFLICT, ERRORS, NOT_FOUND, AppContext, IdPath
from core.aggregator_api import Permit, PermitRefusal, PermitRenewal, PermitRequest

REFUSED: dict[int | str, dict[str, Any]] = {409: {"model": PermitRefusal, "description": "Permit refused."}}


def router(ctx: AppContext) -> APIRouter:
    """A node's agent asks for, renews and gives back its permits; viewers list them."""
    routes = APIRouter(tags=["permits"], responses=ERRORS)
    authenticated = ctx.access.authenticated()

    @routes.post("/v1/permits", response_model=Permit, status_code=201, responses=REFUSED)
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
            return JSONResponse(decision.refusal.model_dump(mode="json", exclude_none=True), status_code=409)
        ctx.metrics.permit_decisions.labels("granted").inc()
        return decision.permit

    @routes.get(
        "/v1/permits",
        response_model=list[Permit],
        dependencies=[ctx.access.role(Role.VIEWER, "list permits")],
    )
    def list_permits(active: bool = True) -> list[Permit]:
        """Permits, newest first (only the active ones unless ``active=false``)."""
        with ctx.db.read() as conn:
            return permits.list_permits(conn, ctx.now(), active_only=active)

    @routes.post("/v1/permits/{permit_id}/renew", response_model=Permit, responses=NOT_FOUND | CONFLICT)
    def renew_permit(
        permit_id: IdPath,
        caller: Caller = authenticated,
        body: PermitRenewal | None = None,
    ) -> Permit:
        """Extend an active permit's TTL (its node's agent only); a lapsed one answers 409: ask anew."""
        with ctx.db.write() as conn:
            require_permit_holder(conn, caller, permit_id, "renew permits")
            renewed = permits.renew_permit(
                conn, permit_id, body.ttl_s if body else None, ctx.settings, ctx.now()
            )
            ctx.audit(conn, caller, "permit_renew", renewed.node, {"permit": permit_id})
            return renewed

    @routes.post("/v1/permits/{permit_id}/release", response_model=Permit, responses=NOT_FOUND)
    def release_permit(permit_id: IdPath, caller: Caller = authenticated) -> Permit:
        """Give the permit back (idempotent). Its node's agent only."""
        with ctx.db.write() as conn:
            require_permit_holder(conn, caller, permit_id, "release permits")
            released = permits.release_permit(conn, permit_id, ctx.now())
            ctx.audit(conn, caller, "permit_release", released.node, {"permit": permit_id})
            return released

    return routes


def require_permit_holder(conn: Any, caller: Caller, permit_id: int, what: str) -> None:
    """Refuse (403) a caller that is no agent; 404 when the permit does not exist or is another node's: the
    same answer for both, so that no node learns which other nodes are being remediated."""
    principal = caller.principal
    if principal.role is not Role.AGENT and not principal.any_node:
        raise Forbidden(f"{principal.describe()} may not {what}: only the node's own agent may")
    node = permits.node_of(conn, permit_id)
    if node is None or not principal.may_act_for(node):
        raise permits.PermitNotFound(no_such_permit(permit_id, principal.node))


def no_such_permit(permit_id: int, node: str | None) -> str:
    """The 404's detail, alike for a permit that does not exist and one of another node."""
    return f"no permit {permit_id}" + (f" of node {node}" if node else "")
