"""How the app answers errors the routes raise: refusals, invalid input, missing or inactive permits, a
database that does not answer."""

from __future__ import annotations

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from aggregator import permits
from aggregator.auth.rules import Forbidden
from aggregator.auth.unauthorized_log import UnauthorizedLog

log = structlog.get_logger(__name__)


def install_handlers(app: FastAPI) -> None:
    """403 (logged, rate-limited), 422 without the input, 404 and 409 for permits, 503 for the database."""
    forbidden_log = UnauthorizedLog(event="request refused: forbidden")

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> JSONResponse:
        forbidden_log.refused(request.client.host if request.client else "unknown", str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=403)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's 422 shape, without echoing the input back: it may be text no encoder can write (a lone
        # surrogate), or megabytes a caller sent; the location and the message say what is wrong.
        errors = [
            {"type": str(error.get("type", "value_error")), "loc": list(error.get("loc", ())),
             "msg": str(error.get("msg", "invalid"))}
            for error in exc.errors()
        ]  # fmt: skip
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(permits.PermitNotFound)
    async def _not_found(_request: Request, exc: permits.PermitNotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(permits.PermitNotActive)
    async def _not_active(_request: Request, exc: permits.PermitNotActive) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(DBAPIError)
    async def _database_down(_request: Request, exc: DBAPIError) -> JSONResponse:
        # Not a bug of the request: the store is unavailable. Agents retry; the message names no secrets.
        log.error("database error", error=type(exc.orig).__name__ if exc.orig else type(exc).__name__)
        return JSONResponse({"detail": "database unavailable"}, status_code=503)
