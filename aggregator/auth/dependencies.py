"""FastAPI glue: the dependency that resolves each request's caller, and per-route role requirements.

No ``from __future__ import annotations`` here: the dependencies are closures, and FastAPI can only read
their ``Annotated`` parameters if the annotations are evaluated where they are defined.
"""

import hmac
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

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
        self.caller: Callable[..., Awaitable[Caller]] = self._caller_dependency()

    def _caller_dependency(self) -> Callable[..., Awaitable[Caller]]:
        identify = self.identify

        async def caller(
            request: Request,
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        ) -> Caller:
            return await identify(request, credentials.credentials if credentials else None)

        return caller

    async def identify(self, request: Request, token: str | None) -> Caller:
        """The caller of ``request`` sending bearer ``token``; 401 when no authenticator knows it.

        On the event loop when the answer is known (a token file entry, a cached review): every report
        passes here, and a thread hop per request cost more than the rest of the authentication. Only an
        answer that needs another server (TokenReview, JWKS) is found in a thread.
        """
        client = request.client.host if request.client else "unknown"
        try:
            known = self._chain.resolve_known(token, client)
            if known is not None:
                return known
            return await run_in_threadpool(self._chain.resolve, token, client)
        except NotAuthenticated as exc:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, str(exc), headers={"WWW-Authenticate": "Bearer"}
            ) from exc

    async def identify_bearer(self, request: Request) -> Caller:
        """:meth:`identify` with the token of the request's ``Authorization: Bearer`` header, if any."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return await self.identify(request, token.strip() if scheme.lower() == "bearer" else None)

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
        identify = self.identify
        metrics_token = self._metrics_token

        async def reader(
            request: Request,
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        ) -> None:
            token = credentials.credentials if credentials else None
            if metrics_token is not None and hmac.compare_digest((token or "").encode(), metrics_token):
                return
            require_role((await identify(request, token)).principal, Role.VIEWER, "read metrics")

        return Depends(reader)
