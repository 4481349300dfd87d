"""The fleet summary, the node list and one node's detail; forgetting a node."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response, status

from aggregator import queries
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.auth.rules import require_agent_or_role
from aggregator.forget import forget_node
from aggregator.pagination import MAX_TOKEN_CHARS, announce_next, node_position
from aggregator.routes.context import BAD_TOKEN, ERRORS, NOT_FOUND, AppContext, NodePath
from core.aggregator_api import STALE, FleetSummary, NodeDetail, NodeForgotten, NodeSummary
from core.health import NodeState

StateQuery = Annotated[str | None, Query(pattern=f"^({'|'.join([*NodeState, STALE])})$")]


def router(ctx: AppContext) -> APIRouter:
    """Viewers read the fleet; a node's own agent reads its record back; an admin forgets a node."""
    routes = APIRouter(tags=["fleet"], responses=ERRORS)
    reader = [ctx.access.role(Role.VIEWER, "read the fleet")]
    authenticated = ctx.access.authenticated()
    admin_forgets = ctx.access.role(Role.ADMIN, "forget a node")

    @routes.get("/v1/fleet", response_model=FleetSummary, dependencies=reader)
    def get_fleet() -> FleetSummary:
        """Nodes by state (stale shown as ``stale``), held nodes, open incidents, breaker and budget."""
        with ctx.db.read() as conn:
            return queries.fleet_summary(conn, ctx.settings, ctx.now())

    @routes.get("/v1/nodes", response_model=list[NodeSummary], dependencies=reader, responses=BAD_TOKEN)
    def get_nodes(
        request: Request,
        response: Response,
        state: StateQuery = None,
        limit: Annotated[int, Query(ge=1, le=queries.MAX_NODES_PAGE)] = queries.MAX_NODES_PAGE,
        continue_token: Annotated[str | None, Query(alias="continue", max_length=MAX_TOKEN_CHARS)] = None,
    ) -> list[NodeSummary]:
        """Nodes by name, optionally only those in one shown state; a full page announces the next one in
        its ``Link`` header (``rel="next"``)."""
        after = node_position(continue_token)
        with ctx.db.read() as conn:
            page = queries.node_list(conn, ctx.now(), state=state, limit=limit, after=after)
        announce_next(request, response, [page[-1].name] if len(page) == limit else None)
        return page

    @routes.get("/v1/nodes/{node}", response_model=NodeDetail, responses=NOT_FOUND)
    def get_node(node: NodePath, caller: Caller = authenticated) -> NodeDetail:
        """One node: GPUs, findings, open incident, pending requests, permit, recent timeline (a viewer, or
        the node's own agent, which reads its record back when it lost its state file)."""
        require_agent_or_role(caller.principal, node, Role.VIEWER, "read node records")
        with ctx.db.read() as conn:
            detail = queries.node_detail(conn, node, ctx.now())
        if detail is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"node {node} has never reported")
        if ctx.peers is not None:
            detail = detail.model_copy(update={"peer_findings": ctx.peers.findings(node)})
        return detail

    @routes.delete("/v1/nodes/{node}", response_model=NodeForgotten, responses=NOT_FOUND)
    def forget(node: NodePath, caller: Caller = admin_forgets) -> Any:
        """Forget a node (admin): its row, incidents, permits and requests; it leaves the budget and the
        breaker's count. Its history stays. Should it report again it starts over."""
        with ctx.db.write() as conn:
            removed = forget_node(conn, node, by=caller.principal.name, now=ctx.now())
            if removed is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"node {node} is not known")
            ctx.audit(conn, caller, "forget_node", node, removed.model_dump(mode="json"))
        return removed

    return routes
