"""FastAPI glue: the dependency that resolves each request's caller, and per-route role requirements.

No ``from __future__ import annotations`` here: the dependencies are closures, and FastAPI can only read
their ``Annotated`` parameters if the annotations are evaluated where they are defined.
"""

import hmac
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from aggregator.auth.chain import AuthChain, Caller, NotAuthenticated
from aggregator.auth.principal import Role
from aggregator.auth.rules import require_role

_bearer = HTTPBearer(
    auto_error=False, description="A token from the token file (or the deprecated shared one)."
)


class Access:
    """Builds the dependencies the routes declare: who the caller is, and which role a route needs."""

    def __init__(self, chain: AuthChain, *, metrics_token: str | None = None) -> None:
        self._chain = chain
        self._metrics_token = metrics_token.encode() if metrics_token else None
        self.caller: Callable[..., Caller] = self._caller_dependency()

    def _caller_dependency(self) -> Callable[..., Caller]:
        chain = self._chain

        # Not async: an authenticator may ask another server (TokenReview), so FastAPI runs this in a thread.
        def caller(
            request: Request,
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        ) -> Caller:
            return _resolve(chain, request, credentials)

        return caller

    def authenticated(self) -> Any:
        """Any authenticated caller; the route applies its own rule (agents' routes)."""
        return Depends(self.caller)

    def role(self, needed: Role, what: str) -> Any:
        """A person (or automation) with ``needed`` or a higher role; ``what`` names the deed in refusals."""
        caller_dependency = self.caller

        async def with_role(caller: Annotated[Caller, Depends(caller_dependency)]) -> Caller:
            require_role(caller.principal, needed, what)
            return caller

        return Depends(with_role)

    def metrics_reader(self) -> Any:
        """The scraper of ``/metrics``: the dedicated metrics token (good for nothing else), or any caller
        with the viewer role or higher (agents are refused: fleet counts are not theirs to read)."""
        chain = self._chain
        metrics_token = self._metrics_token

        def reader(
            request: Request,
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        ) -> None:
            given = credentials.credentials.encode() if credentials else b""
            if metrics_token is not None and hmac.compare_digest(given, metrics_token):
                return
            require_role(_resolve(chain, request, credentials).principal, Role.VIEWER, "read metrics")

        return Depends(reader)


def _resolve(chain: AuthChain, request: Request, credentials: HTTPAuthorizationCredentials | None) -> Caller:
    """The request's caller; 401 (with the scheme to use) when no authenticator knows the token."""
    client = request.client.host if request.client else "unknown"
    try:
        return chain.resolve(credentials.credentials if credentials else None, client)
    except NotAuthenticated as exc:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, str(exc), headers={"WWW-Authenticate": "Bearer"}
        ) from exc
