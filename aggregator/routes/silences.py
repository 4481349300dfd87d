"""Silences: muting alerts about a node, or about the nodes a label selector matches, for a while."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from aggregator.alerts import silences
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.routes.alerts import NOT_FOUND
from aggregator.routes.context import ERRORS, AppContext, IdPath
from core.alerts_api import Silence, SilenceCreate


def router(ctx: AppContext) -> APIRouter:
    """Viewers read silences; operators make and end them (audited)."""
    routes = APIRouter(tags=["alerts"], responses=ERRORS)
    operator_silences = ctx.access.role(Role.OPERATOR, "silence alerts")
    operator_unsilences = ctx.access.role(Role.OPERATOR, "end silences")

    @routes.get(
        "/v1/silences",
        response_model=list[Silence],
        dependencies=[ctx.access.role(Role.VIEWER, "read alerts")],
    )
    def get_silences(active: bool = True) -> list[Silence]:
        """Silences, newest first (only the active ones unless ``active=false``)."""
        with ctx.db.read() as conn:
            return silences.list_silences(conn, ctx.now(), active_only=active)

    @routes.post("/v1/silences", response_model=Silence, status_code=201)
    def post_silence(body: SilenceCreate, caller: Caller = operator_silences) -> Silence:
        """Mute alerts about a node, or every node whose labels match the selector, for a while (operator)."""
        with ctx.db.write() as conn:
            silence = silences.create(conn, body, ctx.now(), created_by=caller.principal.name)
            target = body.node or ",".join(f"{key}={value}" for key, value in sorted(body.selector.items()))
            ctx.audit(conn, caller, "silence", target[:253], {"silence": silence.id, "reason": body.reason})
            return silence

    @routes.delete("/v1/silences/{silence_id}", response_model=Silence, responses=NOT_FOUND)
    def delete_silence(silence_id: IdPath, caller: Caller = operator_unsilences) -> Silence:
        """End a silence now (idempotent; operator)."""
        try:
            with ctx.db.write() as conn:
                silence = silences.remove(conn, silence_id, ctx.now())
                ctx.audit(conn, caller, "silence_remove", str(silence_id))
                return silence
        except silences.SilenceNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc

    return routes
