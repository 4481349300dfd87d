"""Humans' requests to a node's agent (quarantine, release, diagnostics) and the agent's side of them."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.auth.rules import require_agent_of, require_agent_or_role
from aggregator.routes.context import ERRORS, NOT_FOUND, AppContext, IdPath, NodePath
from aggregator.store import diag_requests
from aggregator.store import requests as node_requests
from core.aggregator_api import DiagRequest, ManualRequest, NodeRequest


def router(ctx: AppContext) -> APIRouter:
    """The node's agent reads and acknowledges its requests; operators make them."""
    routes = APIRouter(responses=ERRORS)
    _agents_side(routes, ctx)
    _people_side(routes, ctx)
    return routes


def _agents_side(routes: APIRouter, ctx: AppContext) -> None:
    """The node's agent reads what it has yet to apply, and acknowledges what it applied."""
    authenticated = ctx.access.authenticated()

    @routes.get("/v1/nodes/{node}/requests", response_model=list[NodeRequest], tags=["agents"])
    def get_pending_requests(node: NodePath, caller: Caller = authenticated) -> list[NodeRequest]:
        """Quarantine / release requests the node's agent has yet to apply (its agent, or a viewer)."""
        require_agent_or_role(caller.principal, node, Role.VIEWER, "read requests")
        with ctx.db.read() as conn:
            return node_requests.pending(conn, node)

    @routes.post(
        "/v1/nodes/{node}/requests/{request_id}/ack", response_model=list[NodeRequest], tags=["agents"]
    )
    def ack_request(node: NodePath, request_id: IdPath, caller: Caller = authenticated) -> list[NodeRequest]:
        """The agent applied this request; returns what is still pending (the node's own agent only)."""
        require_agent_of(caller.principal, node, "acknowledge requests")
        with ctx.db.write() as conn:
            node_requests.mark_applied(conn, node, [request_id], ctx.now())
            ctx.audit(conn, caller, "ack_request", node, {"request": request_id})
            return node_requests.pending(conn, node)


def _people_side(routes: APIRouter, ctx: AppContext) -> None:
    """Operators ask a node's agent to quarantine or release its node, or to run diagnostics."""
    operator_quarantines = ctx.access.role(Role.OPERATOR, "quarantine a node")
    operator_releases = ctx.access.role(Role.OPERATOR, "release a node")
    operator_diags = ctx.access.role(Role.OPERATOR, "run diagnostics")

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

    @routes.post(
        "/v1/nodes/{node}/quarantine",
        response_model=NodeRequest,
        status_code=201,
        responses=NOT_FOUND,
        tags=["on-call"],
    )
    def quarantine(node: NodePath, body: ManualRequest, caller: Caller = operator_quarantines) -> NodeRequest:
        """Ask the node's agent to quarantine it (operator); it stays held until released."""
        return manual(node, "quarantine", body, caller)

    @routes.post(
        "/v1/nodes/{node}/release",
        response_model=NodeRequest,
        status_code=201,
        responses=NOT_FOUND,
        tags=["on-call"],
    )
    def release(node: NodePath, body: ManualRequest, caller: Caller = operator_releases) -> NodeRequest:
        """Ask the node's agent to release it (operator); lifts a manual or repeat-offender hold."""
        return manual(node, "release", body, caller)

    @routes.post(
        "/v1/nodes/{node}/diag",
        response_model=NodeRequest,
        status_code=201,
        responses=NOT_FOUND,
        tags=["on-call"],
    )
    def diag(node: NodePath, body: DiagRequest, caller: Caller = operator_diags) -> NodeRequest:
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
