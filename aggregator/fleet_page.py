"""The fleet page: static assets shipped in the package (``aggregator/ui/``, no build step) at ``/ui/``, and
the one read the page needs beyond the API, ``GET /v1/fleet/grid`` (every node's state and GPUs, compact).

The page itself carries no data: it asks the API with the person's bearer token, so it has exactly the API's
authentication and roles. Its responses forbid framing and scripts from anywhere but the aggregator itself.

No ``from __future__ import annotations``: ``whoami`` declares its caller dependency in an ``Annotated``
parameter, which FastAPI can read only when annotations are evaluated where the route is defined.
"""

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

from aggregator import queries
from aggregator.auth.chain import Caller
from aggregator.auth.dependencies import Access
from aggregator.auth.principal import Role
from aggregator.store.engine import Database
from core.aggregator_api import GridNode, WhoAmI

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
    access: Access,
    responses: dict[int | str, dict[str, Any]],
) -> None:
    """Add ``/``, ``/ui/`` (the page and its assets), ``GET /v1/fleet/grid`` and ``GET /v1/whoami``."""
    reader = [access.role(Role.VIEWER, "read the fleet")]

    @app.get("/v1/whoami", response_model=WhoAmI, responses=responses, tags=["fleet"])
    def whoami(caller: Annotated[Caller, access.authenticated()]) -> WhoAmI:
        """Who the token belongs to and its role: the page shows the operator's buttons only to operators."""
        principal = caller.principal
        return WhoAmI(name=principal.name, role=principal.role.value, node=principal.node)

    @app.get("/v1/fleet/grid", response_model=list[GridNode], dependencies=reader, responses=responses,
             tags=["fleet"])  # fmt: skip
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
