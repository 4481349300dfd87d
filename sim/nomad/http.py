"""The HTTP face of the Nomad emulator: a raw ASGI app (Starlette request/response types) served by uvicorn.

Behaviour that every endpoint shares, from the Nomad HTTP API overview (developer.hashicorp.com/nomad/
api-docs): JSON bodies with PascalCase fields; refusals as plain text with the status code (403
"Permission denied", 404 "<thing> not found", 400 for bad input); ``X-Nomad-Token`` carries the ACL
secret; reads answer with ``X-Nomad-Index``, ``X-Nomad-KnownLeader`` and ``X-Nomad-LastContact`` and are
blocking queries: with ``?index=N`` the answer waits until the index passes ``N`` or ``wait`` (a Go
duration, default 5m, at most 10m) runs out. A blocking query ends early when its client goes away (nothing
is left waiting for a reader that is gone) or when the server stops (it is answered at once).

A path starting ``/local/<node name>`` reaches that node's own client agent (``/v1/agent/self`` reports the
node, ``/v1/client/metadata`` defaults to it), the way a Nomad client's local HTTP address would.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

import structlog
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from sim.kube.faults import FaultInjector
from sim.nomad import errors
from sim.nomad.acl import Acl
from sim.nomad.errors import NomadApiError
from sim.nomad.state import NomadState

log = structlog.get_logger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_WAIT_S: Final = 300.0
MAX_WAIT_S: Final = 600.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_LOCAL: Final = re.compile(r"^/local/([^/]+)(/.*)$")


def parse_duration(text: str) -> float:
    """A Go duration (``5s``, ``100ms``, ``1m30s``) or bare seconds, in seconds; 400 when malformed."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text:
        raise errors.bad_request(f"Invalid wait time: {text!r}")
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


@dataclass(frozen=True)
class Call:
    """One request as the handlers see it."""

    method: str
    path_params: dict[str, str]
    query: QueryParams
    token: str | None
    local_node: str | None  # the node ID when the path came through /local/<name>
    body: Any


ReadHandler = Callable[[Call], tuple[Any, int]]


@dataclass(frozen=True)
class Route:
    """One endpoint: a method, a path pattern with ``:name`` segments, its handler and whether it blocks."""

    method: str
    template: str
    handler: Callable[[Call], Any]
    blocking: bool

    @property
    def pattern(self) -> re.Pattern[str]:
        """The template as an anchored regular expression."""
        regex = re.sub(r":(\w+)", r"(?P<\1>[^/]+)", self.template)
        return re.compile(f"^{regex}$")


class NomadApp:
    """The ASGI application: routing, faults, ACL token extraction, blocking queries, counters."""

    def __init__(self, state: NomadState, acl: Acl, faults: FaultInjector, routes: list[Route]) -> None:
        self.state = state
        self.acl = acl
        self.faults = faults
        self._routes = [(route, route.pattern) for route in routes]
        self.mutating_requests: Counter[str] = Counter()
        self.read_requests: Counter[str] = Counter()
        self.closing = False
        self._open_queries = 0  # blocking queries waiting now (touched on the event loop only)

    @property
    def open_queries(self) -> int:
        """How many blocking queries are waiting for a change right now."""
        return self._open_queries

    def open(self) -> None:
        """Accept blocking queries again (the listener (re)starts)."""
        self.closing = False

    def close(self) -> None:
        """Answer every open blocking query now, so that the listener stops without waiting on them."""
        self.closing = True
        self.state.wake_waiters()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            response = await self._handle(request)
        except _ClientGone:
            return  # nobody to answer: uvicorn closes the connection quietly
        except NomadApiError as error:
            response = Response(error.message, status_code=error.code, media_type="text/plain")
        except Exception as error:  # answer 500 rather than drop the connection, as Nomad's HTTP server does
            log.exception("nomad sim request failed", method=request.method, path=request.url.path)
            response = Response(str(error), status_code=500, media_type="text/plain")
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        path, local_node = self._split_local(request.url.path)
        route, params = self._match(request.method, path)
        outcome = self.faults.decide(
            "get" if request.method == "GET" else "create", path.split("/")[2] if path.count("/") > 1 else "*"
        )
        if outcome.delay_s > 0:
            await asyncio.sleep(outcome.delay_s)
        if outcome.error is not None:
            raise NomadApiError(outcome.error.code, outcome.error.message)
        body = await self._body(request)
        call = Call(
            request.method,
            params,
            request.query_params,
            request.headers.get("x-nomad-token"),
            local_node,
            body,
        )
        counter = self.read_requests if request.method == "GET" else self.mutating_requests
        counter[f"{request.method} {route.template}"] += 1
        if route.blocking:
            result, index = await self._blocking_read(route, call, request.receive)
        else:
            result, index = route.handler(call), self.state.index()
        headers = {"X-Nomad-Index": str(index), "X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "0"}
        return Response(json.dumps(result), media_type="application/json", headers=headers)

    def _split_local(self, path: str) -> tuple[str, str | None]:
        match = _LOCAL.match(path)
        if match is None:
            return path, None
        node = self.state.node(match.group(1))  # 404 "node not found" for an unknown node name
        return match.group(2), str(node["ID"])

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = False
        for route, pattern in self._routes:
            found = pattern.match(path)
            if found is None:
                continue
            if route.method == method:
                return route, found.groupdict()
            allowed = True
        if allowed:
            raise NomadApiError(405, "Invalid method")
        raise NomadApiError(404, "404 page not found")

    @staticmethod
    async def _body(request: Request) -> Any:
        if request.method == "GET":
            return None
        raw = await request.body()
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise errors.bad_request("Request body is not valid JSON") from None

    async def _blocking_read(self, route: Route, call: Call, receive: Receive) -> tuple[Any, int]:
        handler: ReadHandler = route.handler
        index_text = call.query.get("index")
        if index_text is None:
            return handler(call)
        try:
            min_index = int(index_text)
        except ValueError:
            raise errors.bad_request(f"Invalid index: {index_text!r}") from None
        wait_s = min(
            parse_duration(call.query.get("wait", "")) if call.query.get("wait") else DEFAULT_WAIT_S,
            MAX_WAIT_S,
        )
        deadline = time.monotonic() + wait_s
        # Watching for the client's disconnect lets a long poll whose reader is gone end at once, instead
        # of holding a task (and the server's shutdown) until its wait runs out.
        gone = asyncio.ensure_future(_client_gone(receive))
        self._open_queries += 1
        try:
            with self.state.async_waiter() as changed:
                while True:
                    changed.clear()
                    result, index = handler(call)
                    remaining = deadline - time.monotonic()
                    if index > min_index or remaining <= 0 or self.closing:
                        return result, index
                    if not await _changed_or_gone(changed, gone, remaining):
                        return handler(call)
        finally:
            self._open_queries -= 1
            gone.cancel()


class _ClientGone(Exception):
    """The client of a blocking query closed its connection: there is no one to answer."""


async def _client_gone(receive: Receive) -> None:
    """Return once the client has disconnected (the ASGI server sends ``http.disconnect``)."""
    while (await receive())["type"] != "http.disconnect":
        pass  # the request's own (empty) body of a GET comes first


async def _changed_or_gone(changed: asyncio.Event, gone: asyncio.Future[None], timeout_s: float) -> bool:
    """True when the store changed (or the server woke us to close), False when ``timeout_s`` ran out;
    raises :class:`_ClientGone` when the client went away first."""
    woken: asyncio.Future[Any] = asyncio.ensure_future(changed.wait())
    either: set[asyncio.Future[Any]] = {woken, gone}
    try:
        done, _ = await asyncio.wait(either, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
    if gone in done:
        raise _ClientGone
    return woken in done
