"""The aggregator's HTTP API (FastAPI): ``create_app(settings)`` builds it; ``/openapi.json`` documents it.

The routes live in ``aggregator/routes/``, one ``APIRouter`` per resource; this module only puts the parts
together: the store, the background threads and the routers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime

from fastapi import FastAPI

from aggregator.alerts.worker import DeliveryWorker
from aggregator.auth.chain import build_chain
from aggregator.auth.dependencies import Access
from aggregator.batching import ReportWriter
from aggregator.body_limit import BodyLimitMiddleware
from aggregator.metrics import AggregatorMetrics
from aggregator.peers.fleet import PeerView
from aggregator.remediator import DrainFactory, build_remediator
from aggregator.retention import Pruner
from aggregator.routes import (
    alerts,
    audit,
    breaker,
    drains,
    history,
    nodes,
    peers,
    permits,
    probes,
    reliability,
    reports,
    requests,
    silences,
    ui,
)
from aggregator.routes.context import AppContext
from aggregator.routes.errors import install_handlers
from aggregator.settings import AggregatorSettings
from aggregator.store.engine import Database, open_database
from core.clock import utc_now

# In this order: the OpenAPI document lists the paths as the routers add them.
ROUTERS = (
    probes,
    reports,
    nodes,
    requests,
    history,
    audit,
    permits,
    drains,
    breaker,
    alerts,
    silences,
    ui,
    peers,
    reliability,
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
    ctx = AppContext(
        db=db,
        settings=settings,
        metrics=AggregatorMetrics(db, now),
        now=now,
        access=access,
        writer=ReportWriter(db, settings, now),
        remediator=build_remediator(db, settings, now, drain_for),
        peers=PeerView(db, settings.peers, now),
    )
    app = FastAPI(
        title="gpuhealth aggregator",
        version="1",
        description="Fleet health, incident history, remediation permits and the fleet circuit breaker.",
        lifespan=_lifespan(ctx),
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_report_bytes)
    app.state.remediator = ctx.remediator
    app.state.peers = ctx.peers
    install_handlers(app)
    for resource in ROUTERS:
        app.include_router(resource.router(ctx))
    ui.mount_assets(app)
    return app


def _lifespan(ctx: AppContext) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the alert deliveries, the pruner and the remediator with the app; stop them, the report writer
    and the database with it."""
    alert_worker = DeliveryWorker(ctx.db, ctx.settings, ctx.now)
    pruner = Pruner(ctx.db, ctx.settings, ctx.now)
    remediator = ctx.remediator
    peer_view = ctx.peers

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        alert_worker.start()
        pruner.start()
        if remediator is not None:
            remediator.start()
        if peer_view is not None:
            peer_view.start()
        yield
        if peer_view is not None:
            peer_view.stop()
        if remediator is not None:
            remediator.stop()
        alert_worker.stop()
        pruner.stop()
        ctx.writer.stop()
        ctx.db.dispose()

    return lifespan
