"""Central drains: the node's agent orders the drain of its node under its permit, and reads it back (by
permit, or its node's latest: how a restarted agent finds the drain it ordered before)."""

from __future__ import annotations

import structlog
from fastapi import APIRouter, HTTPException, status

from aggregator import permits
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.auth.rules import require_agent_or_role
from aggregator.routes.context import CONFLICT, ERRORS, NOT_FOUND, AppContext, IdPath, NodePath
from aggregator.routes.permits import no_such_permit, require_permit_holder
from aggregator.store import drains
from core.aggregator_api import CentralDrain, DrainOrder

log = structlog.get_logger(__name__)


def router(ctx: AppContext) -> APIRouter:
    """Orders under a permit (its node's agent); reads by the agent or a viewer."""
    routes = APIRouter(responses=ERRORS)
    authenticated = ctx.access.authenticated()

    @routes.post(
        "/v1/permits/{permit_id}/drain",
        response_model=CentralDrain,
        status_code=202,
        responses=NOT_FOUND | CONFLICT,
        tags=["permits"],
    )
    def order_drain(permit_id: IdPath, body: DrainOrder, caller: Caller = authenticated) -> CentralDrain:
        """Drain the permit's node for its incident, then requeue its jobs: the central remediator does it
        with its own credentials (its node's agent only; the permit must be active; idempotent)."""
        with ctx.db.write() as conn:
            require_permit_holder(conn, caller, permit_id, "order drains")
            try:
                ordered = drains.order(conn, permit_id, body.deadline_s, ctx.now())
            except drains.DrainOrderRefused as exc:
                raise permits.PermitNotActive(str(exc)) from exc
            ctx.audit(conn, caller, "drain_order", ordered.node, {"permit": permit_id})
        if ctx.remediator is None and ordered.phase == "requested":
            # Another aggregator on the same database may run one; if none does, the order waits (and the
            # node's agent keeps its permit) until someone sets remediator.orchestrator.
            log.warning("drain_ordered_without_remediator", node=ordered.node, permit=permit_id)
        return ordered

    @routes.get(
        "/v1/permits/{permit_id}/drain", response_model=CentralDrain, responses=NOT_FOUND, tags=["permits"]
    )
    def get_drain(permit_id: IdPath, caller: Caller = authenticated) -> CentralDrain:
        """Where the central drain of a permit stands, with its news (its node's agent, or a viewer)."""
        with ctx.db.read() as conn:
            node = permits.node_of(conn, permit_id)
            if node is None or not _may_read(caller, node):
                # Another node's permit reads as none at all: ids must not tell which nodes are remediated.
                raise permits.PermitNotFound(no_such_permit(permit_id, caller.principal.node))
            require_agent_or_role(caller.principal, node, Role.VIEWER, "read drains")
            found = drains.get(conn, permit_id)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no drain was ordered under permit {permit_id}")
        return found

    @routes.get("/v1/nodes/{node}/drain", response_model=CentralDrain, responses=NOT_FOUND, tags=["agents"])
    def latest_drain(node: NodePath, caller: Caller = authenticated) -> CentralDrain:
        """The node's most recent central drain, with its news (its agent, or a viewer)."""
        require_agent_or_role(caller.principal, node, Role.VIEWER, "read drains")
        with ctx.db.read() as conn:
            found = drains.latest_of(conn, node)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no drain was ever ordered for node {node}")
        return found

    return routes


def _may_read(caller: Caller, node: str) -> bool:
    """An agent reads its own node's permits only; anyone else is judged by role (a 403 if too low)."""
    principal = caller.principal
    return principal.role is not Role.AGENT or principal.may_act_for(node)
