"""HTTP routes of alerts and silences (registered by :func:`aggregator.app.create_app`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Path, Query, status

from aggregator.alerts import outbox, silences
from aggregator.auth.chain import Caller
from aggregator.auth.dependencies import Access
from aggregator.auth.principal import Role
from aggregator.store.engine import Database
from core.alerts_api import AlertView, Delivery, Silence, SilenceCreate

IdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]


def register(
    app: FastAPI,
    *,
    db: Database,
    now: Callable[[], datetime],
    access: Access,
    audit: Callable[..., None],
    responses: dict[int | str, dict[str, Any]],
) -> None:
    """Add ``/v1/alerts`` and ``/v1/silences``: viewers read them, operators change them (audited)."""
    not_found: dict[int | str, dict[str, Any]] = {404: {"description": "No such object."}}
    dependencies = [access.role(Role.VIEWER, "read alerts")]
    operator_retries = access.role(Role.OPERATOR, "retry alert deliveries")
    operator_silences = access.role(Role.OPERATOR, "silence alerts")
    operator_unsilences = access.role(Role.OPERATOR, "end silences")

    @app.get(
        "/v1/alerts",
        response_model=list[AlertView],
        dependencies=dependencies,
        responses=responses,
        tags=["alerts"],
    )
    def get_alerts(
        failed: bool = False, limit: Annotated[int, Query(ge=1, le=outbox.MAX_LISTED)] = 100
    ) -> list[AlertView]:
        """Alerts newest first with their deliveries; ``failed=true``: only those dead-lettered somewhere."""
        with db.read() as conn:
            return outbox.list_alerts(conn, failed_only=failed, limit=limit)

    @app.post(
        "/v1/alerts/deliveries/{delivery_id}/retry",
        response_model=Delivery,
        responses=responses | not_found | {409: {"description": "Delivered already (force=true resends)."}},
        tags=["alerts"],
    )
    def retry_delivery(
        delivery_id: IdPath,
        caller: Caller = operator_retries,
        force: Annotated[bool, Query(description="Send it again even though it was delivered.")] = False,
    ) -> Delivery:
        """Send a dead-lettered delivery again now, with a fresh attempt count (operator); a delivered one
        is refused (409) unless ``force=true``."""
        try:
            with db.write() as conn:
                delivery = outbox.retry(conn, delivery_id, now(), force=force)
                audit(conn, caller, "alert_retry", str(delivery_id), {"force": force} if force else None)
                return delivery
        except outbox.DeliveryNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
        except outbox.AlreadyDelivered as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from exc

    @app.get(
        "/v1/silences",
        response_model=list[Silence],
        dependencies=dependencies,
        responses=responses,
        tags=["alerts"],
    )
    def get_silences(active: bool = True) -> list[Silence]:
        """Silences, newest first (only the active ones unless ``active=false``)."""
        with db.read() as conn:
            return silences.list_silences(conn, now(), active_only=active)

    @app.post("/v1/silences", response_model=Silence, status_code=201, responses=responses, tags=["alerts"])
    def post_silence(body: SilenceCreate, caller: Caller = operator_silences) -> Silence:
        """Mute alerts about a node, or every node whose labels match the selector, for a while (operator)."""
        with db.write() as conn:
            silence = silences.create(conn, body, now(), created_by=caller.principal.name)
            target = body.node or ",".join(f"{key}={value}" for key, value in sorted(body.selector.items()))
            audit(conn, caller, "silence", target[:253], {"silence": silence.id, "reason": body.reason})
            return silence

    @app.delete(
        "/v1/silences/{silence_id}", response_model=Silence, responses=responses | not_found, tags=["alerts"]
    )
    def delete_silence(silence_id: IdPath, caller: Caller = operator_unsilences) -> Silence:
        """End a silence now (idempotent; operator)."""
        try:
            with db.write() as conn:
                silence = silences.remove(conn, silence_id, now())
                audit(conn, caller, "silence_remove", str(silence_id))
                return silence
        except silences.SilenceNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
