"""Incidents and the event history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status

from aggregator import queries
from aggregator.auth.principal import Role
from aggregator.pagination import MAX_TOKEN_CHARS, announce_next, event_position
from aggregator.routes.context import BAD_TOKEN, ERRORS, NOT_FOUND, AppContext
from core.aggregator_api import NODE_NAME_PATTERN, Event, IncidentDetail, IncidentSummary

NodeQuery = Annotated[str | None, Query(pattern=NODE_NAME_PATTERN, max_length=253)]
SinceQuery = Annotated[str | None, Query(max_length=64, description="1h, 30m, 2d or an ISO time")]
# ``~``: the node-scoped ids the aggregator gives (aggregator/incident_ids.py).
IncidentPath = Annotated[str, Path(max_length=128, pattern=r"^[A-Za-z0-9._:~-]+$")]
ContinueQuery = Annotated[str | None, Query(alias="continue", max_length=MAX_TOKEN_CHARS)]


def router(ctx: AppContext) -> APIRouter:
    """Viewers read the history."""
    routes = APIRouter(
        tags=["history"], responses=ERRORS, dependencies=[ctx.access.role(Role.VIEWER, "read the history")]
    )

    @routes.get("/v1/incidents", response_model=list[IncidentSummary])
    def get_incidents(
        node: NodeQuery = None,
        open_only: Annotated[bool, Query(alias="open")] = False,
        since: SinceQuery = None,
    ) -> list[IncidentSummary]:
        """Incidents, newest first."""
        when = ctx.since(since)
        with ctx.db.read() as conn:
            return queries.incident_list(conn, node=node, open_only=open_only, since=when)

    @routes.get("/v1/incidents/{incident_id}", response_model=IncidentDetail, responses=NOT_FOUND)
    def get_incident(incident_id: IncidentPath) -> IncidentDetail:
        """One incident with its timeline of findings and actions."""
        with ctx.db.read() as conn:
            detail = queries.incident_detail(conn, incident_id)
        if detail is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no incident {incident_id}")
        return detail

    @routes.get("/v1/events", response_model=list[Event], responses=BAD_TOKEN)
    def get_events(
        request: Request,
        response: Response,
        *,
        node: NodeQuery = None,
        since: SinceQuery = None,
        limit: Annotated[int, Query(ge=1, le=queries.MAX_EVENTS)] = 200,
        continue_token: ContinueQuery = None,
        kind: Annotated[str | None, Query(max_length=32, pattern=r"^[a-z_]+$")] = None,
    ) -> list[Event]:
        """History (state changes, findings, actions, permits, breaker, requests): the newest ``limit``
        events, oldest first; when there are older ones, the ``Link`` header (``rel="next"``) names the page
        before them, and the first page's ``X-Total-Count`` says how many match in all (a repeated line
        is one event with a count)."""
        when = ctx.since(since)
        before = event_position(continue_token)
        with ctx.db.read() as conn:
            page = queries.event_list(conn, node=node, since=when, limit=limit, before=before, kind=kind)
            if before is None:
                full = len(page) == limit
                total = queries.event_count(conn, node=node, since=when, kind=kind) if full else len(page)
                response.headers["X-Total-Count"] = str(total)
        oldest = [page[0].at.isoformat(), page[0].id] if len(page) == limit else None
        announce_next(request, response, oldest)
        return page

    return routes
