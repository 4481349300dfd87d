"""Run the aggregator service under uvicorn (``gpuhealth aggregator`` and ``python -m aggregator``)."""

from __future__ import annotations

import gc

import uvicorn

from aggregator.app import create_app
from aggregator.settings import AggregatorSettings


def serve(settings: AggregatorSettings) -> None:
    """Open (and migrate) the database, then serve until SIGINT / SIGTERM."""
    app = create_app(settings)
    gc.freeze()  # start-up objects (models, routes, SQL metadata) never die: keep full collections short
    log_level = "warning"
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=log_level, access_log=False)
