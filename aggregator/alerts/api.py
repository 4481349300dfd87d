"""HTTP routes of alerts and silences (registered by :func:`aggregator.app.create_app`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Path, Query, status

from aggregator.alerts import outbox, silences
from aggregator.store.engine import Database
from gpuhealth.core.alerts_api import AlertView, Delivery, Silence, SilenceCreate

IdPath = Annotated[int, Path(ge=1, le=2**63 - 1)]


def register(
    app: FastAPI,
    *,
    db: Database,
    now: Callable[[], datetime],
    dependencies: list[Any],
    responses: dict[int | str, dict[str, Any]],
) -> None:
    """Add ``/v1/alerts`` and ``/v1/silences``."""
    not_found: dict[int | str, dict[str, Any]] = {404: {"description": "No such object."}}

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
        dependencies=dependencies,
        responses=responses | not_found,
        tags=["alerts"],
    )
    def retry_delivery(delivery_id: IdPath) -> Delivery:
        """Send a dead-lettered delivery again now, with a fresh attempt count."""
        try:
            with db.write() as conn:
                return outbox.retry(conn, delivery_id, now())
        except outbox.DeliveryNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc

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

    @app.post(
        "/v1/silences",
        response_model=Silence,
        status_code=201,
        dependencies=dependencies,
        responses=responses,
        tags=["alerts"],
    )
    def post_silence(body: SilenceCreate) -> Silence:
        """Mute alerts about a node, or every node whose labels match the selector, for a while."""
        with db.write() as conn:
            return silences.create(conn, body, now())

    @app.delete(
        "/v1/silences/{silence_id}",
        response_model=Silence,
        dependencies=dependencies,
        responses=responses | not_found,
        tags=["alerts"],
    )
    def delete_silence(silence_id: IdPath) -> Silence:
        """End a silence now (idempotent)."""
        try:
            with db.write() as conn:
                return silences.remove(conn, silence_id, now())
        except silences.SilenceNotFound as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
