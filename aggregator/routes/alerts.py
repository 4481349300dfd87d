"""Alerts with their deliveries, and the retry of a dead-lettered delivery."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status

from aggregator.alerts import outbox
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.routes.context import ERRORS, AppContext, IdPath
from core.alerts_api import AlertView, Delivery

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "No such object."}}
ALREADY_DELIVERED: dict[int | str, dict[str, Any]] = {
    409: {"description": "Delivered already: force=true sends it again."}
}


def router(ctx: AppContext) -> APIRouter:
    """Viewers read alerts; operators retry deliveries (audited)."""
    routes = APIRouter(tags=["alerts"], responses=ERRORS)
    operator_retries = ctx.access.role(Role.OPERATOR, "retry alert deliveries")

    @routes.get(
        "/v1/alerts",
        response_model=list[AlertView],
        dependencies=[ctx.access.role(Role.VIEWER, "read alerts")],
    )
    def get_alerts(
        failed: bool = False, limit: Annotated[int, Query(ge=1, le=outbox.MAX_LISTED)] = 100
    ) -> list[AlertView]:
        """Alerts newest first with their deliveries; ``failed=true``: only those dead-lettered somewhere."""
        with ctx.db.read() as conn:
            return outbox.list_alerts(conn, failed_only=failed, limit=limit)

    @routes.post(
        "/v1/alerts/deliveries/{delivery_id}/retry",
        response_model=Delivery,
        responses=NOT_FOUND | ALREADY_DELIVERED,
    )
    def retry_delivery(
        delivery_id: IdPath,
        caller: Caller = operator_retries,
        force: Annotated[bool, Query(description="Send it again even though it was delivered.")] = False,
    ) -> Delivery:
        """Send a dead-lettered delivery again now, with a fresh attempt count (operator); a delivered one
        is refused (409) unless ``force=true``."""
        try:
            with ctx.db.write() as conn:
                delivery = outbox.retry(conn, delivery_id, ctx.now(), force=force)
                ctx.audit(conn, caller, "alert_retry", str(delivery_id), {"force": force} if force else None)
                return delivery
        except outbox.DeliveryNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
        except outbox.AlreadyDelivered as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc

    return routes
