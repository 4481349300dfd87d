"""The fleet page: static assets shipped in the package (``aggregator/ui/``, no build step) at ``/ui/``, and
the one read the page needs beyond the API, ``GET /v1/fleet/grid`` (every node's state and GPUs, compact).

The page itself carries no data: it asks the API with the person's bearer token, so it has exactly the API's
authentication and roles. Its responses forbid framing and scripts from anywhere but the aggregator itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

from aggregator import queries
from aggregator.store.engine import Database
from gpuhealth.core.aggregator_api import GridNode

UI_DIR = Path(__file__).resolve().parent / "ui"
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def register(
    app: FastAPI,
    *,
    db: Database,
    now: Callable[[], datetime],
    dependencies: Sequence[Any],
    responses: dict[int | str, dict[str, Any]],
) -> None:
    """Add ``/``, ``/ui/`` (the page and its assets) and ``GET /v1/fleet/grid``."""

    @app.get("/v1/fleet/grid", response_model=list[GridNode], dependencies=list(dependencies),
             responses=responses, tags=["fleet"])  # fmt: skip
    def get_fleet_grid() -> list[GridNode]:
        """Every node for the fleet page's grid: shown state, zone, pool, one letter per GPU (o w f u)."""
        with db.read() as conn:
            return queries.fleet_grid(conn, now())

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    app.mount("/ui/static", StaticFiles(directory=UI_DIR), name="ui-static")
