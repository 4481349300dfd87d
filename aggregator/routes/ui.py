"""The fleet page: static assets shipped in the package (``aggregator/ui/``, no build step) at ``/ui/``, and
the reads the page needs beyond the API, ``GET /v1/fleet/grid`` (every node's state and GPUs, compact) and
``GET /v1/whoami``.

The page itself carries no data: it asks the API with the person's bearer token, so it has exactly the API's
authentication and roles. Its responses forbid framing and scripts from anywhere but the aggregator itself.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

from aggregator import queries
from aggregator.auth.chain import Caller
from aggregator.auth.principal import Role
from aggregator.routes.context import ERRORS, AppContext
from core.aggregator_api import GridNode, WhoAmI

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def router(ctx: AppContext) -> APIRouter:
    """``/``, ``/ui/``, ``GET /v1/fleet/grid`` (viewers) and ``GET /v1/whoami`` (anyone authenticated); the
    assets are mounted by :func:`mount_assets`."""
    routes = APIRouter()
    authenticated = ctx.access.authenticated()
    reader = [ctx.access.role(Role.VIEWER, "read the fleet")]

    @routes.get("/v1/whoami", response_model=WhoAmI, responses=ERRORS, tags=["fleet"])
    def whoami(caller: Caller = authenticated) -> WhoAmI:
        """Who the token belongs to and its role: the page shows the operator's buttons only to operators."""
        principal = caller.principal
        return WhoAmI(name=principal.name, role=principal.role.value, node=principal.node)

    @routes.get(
        "/v1/fleet/grid", response_model=list[GridNode], dependencies=reader, responses=ERRORS, tags=["fleet"]
    )
    def get_fleet_grid() -> list[GridNode]:
        """Every node for the fleet page's grid: shown state, zone, pool, one letter per GPU (o w f u)."""
        with ctx.db.read() as conn:
            return queries.fleet_grid(conn, ctx.now())

    @routes.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @routes.get("/ui/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    return routes


def mount_assets(app: FastAPI) -> None:
    """The page's script and style at ``/ui/static``."""
    app.mount("/ui/static", StaticFiles(directory=UI_DIR), name="ui-static")
