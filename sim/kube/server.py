"""The HTTP face of the emulator: a raw ASGI app (Starlette request/response types) served by uvicorn.

Paths are the API server's (https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris):
``/api/v1/{plural}``, ``/api/v1/namespaces/{ns}/{plural}/{name}/{subresource}``, ``/apis/{g}/{v}/...``,
the discovery documents, ``/version`` and the health endpoints. Every refusal is a ``Status`` body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from sim.http_server import ThreadedHttpServer
from sim.kube import errors
from sim.kube.api import KubeApi, Reply, Target, list_query, parse_json_body, parse_selectors
from sim.kube.errors import ApiError
from sim.kube.faults import FaultInjector
from sim.kube.openapi import openapi_v3_document, openapi_v3_index
from sim.kube.resources import (
    ResourceRegistry,
    UnknownResourceError,
    api_group_document,
    api_group_list_document,
    api_resource_list_document,
    api_versions_document,
)
from sim.kube.store import dumps
from sim.kube.token_review import TokenReviewer
from sim.kube.watch import DEFAULT_WATCH_TIMEOUT_S, WatchHub, WatchRequest, watch_stream

log = structlog.get_logger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

KUBERNETES_VERSION = {"major": "1", "minor": "37"}
_TOKEN_REVIEWS = ["apis", "authentication.k8s.io", "v1", "tokenreviews"]
_TRUE = ("true", "1")


@dataclass(frozen=True)
class Route:
    """A parsed resource URL: the target and the verb the method implies."""

    target: Target
    verb: str


def _version_document() -> dict[str, str]:
    return {
        **KUBERNETES_VERSION,
        "gitVersion": "v1.37.0-gpuhealth-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _json(obj: Any, code: int = 200) -> Response:
    return Response(dumps(obj), status_code=code, media_type="application/json")


def _error_response(error: ApiError) -> Response:
    headers = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else None
    return Response(
        dumps(error.to_status()), status_code=error.code, media_type="application/json", headers=headers
    )


def _reply_response(reply: Reply) -> Response:
    return Response(
        reply.body, status_code=reply.code, media_type="application/json", headers=reply.headers or None
    )


def _require_named(body: Any) -> dict[str, Any]:
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("metadata"), dict)
        or not body["metadata"].get("name")
    ):
        raise errors.bad_request("a Binding needs metadata.name (the pod to bind)")
    return body


_NOT_FOUND_PATH = ApiError(404, "NotFound", "the server could not find the requested resource")

_VERB_BY_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class KubeApp:
    """The ASGI application."""

    def __init__(
        self, api: KubeApi, faults: FaultInjector, hub: WatchHub, token_reviewer: TokenReviewer | None = None
    ) -> None:
        self.api = api
        self.token_reviewer = token_reviewer or TokenReviewer()
        self.registry: ResourceRegistry = api.store.registry
        self.faults = faults
        self.hub = hub
        self.server_address = "127.0.0.1:0"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            response = await self._handle(request)
        except ApiError as error:
            response = _error_response(error)
        except Exception as error:  # the API server answers 500 rather than dropping the connection
            log.exception("request failed", method=request.method, path=request.url.path)
            response = _error_response(errors.internal(str(error)))
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        segments = [s for s in request.url.path.split("/") if s]
        if segments == _TOKEN_REVIEWS and request.method == "POST":
            review = self.token_reviewer.review(parse_json_body(await request.body()))
            return Response(dumps(review), status_code=201, media_type="application/json")
        fixed = self._fixed_path(segments)
        if fixed is not None:
            if request.method != "GET":
                raise errors.method_not_allowed()
            return fixed
        route = self._route(request, segments)
        if route is None:
            raise _NOT_FOUND_PATH
        resource_name = route.target.key + (
            f"/{route.target.subresource}" if route.target.subresource else ""
        )
        if request.query_params.get("dryRun"):
            # Refused rather than ignored: silently committing a dry run would be worse than failing.
            raise errors.bad_request("dryRun is not supported by the emulated API server")
        outcome = self.faults.decide(route.verb, resource_name)
        if outcome.delay_s > 0:
            await asyncio.sleep(outcome.delay_s)
        if outcome.error is not None:
            raise outcome.error
        return await self._dispatch(request, route)

    def _fixed_path(self, segments: list[str]) -> Response | None:
        """Discovery, version and health paths; None for a resource path."""
        path = "/".join(segments)
        if path in ("", "healthz", "livez", "readyz", "version", "api", "apis"):
            return self._fixed_documents()[path]()
        if segments[0] == "openapi":
            return self._openapi(segments[1:])
        if segments[0] not in ("api", "apis"):
            raise _NOT_FOUND_PATH
        document: Any = None
        if segments[0] == "api" and len(segments) == 2:
            document = api_resource_list_document(self.registry, "", segments[1])
        elif segments[0] == "apis" and len(segments) == 2:
            document = api_group_document(self.registry, segments[1])
        elif segments[0] == "apis" and len(segments) == 3:
            document = api_resource_list_document(self.registry, segments[1], segments[2])
        else:
            return None
        if document is None:
            raise _NOT_FOUND_PATH
        return _json(document)

    def _openapi(self, segments: list[str]) -> Response:
        """``/openapi/v3`` and its group-version documents (``sim/kube/openapi.py``); v2 is not served."""
        document: Any = None
        if segments == ["v3"]:
            document = openapi_v3_index(self.registry)
        elif len(segments) == 3 and segments[:2] == ["v3", "api"]:
            document = openapi_v3_document(self.registry, "", segments[2])
        elif len(segments) == 4 and segments[:2] == ["v3", "apis"]:
            document = openapi_v3_document(self.registry, segments[2], segments[3])
        if document is None:
            raise _NOT_FOUND_PATH
        return _json(document)

    def _fixed_documents(self) -> dict[str, Callable[[], Response]]:
        ok = Response(b"ok", media_type="text/plain")
        return {
            "": lambda: _json(
                {"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}
            ),
            "healthz": lambda: ok,
            "livez": lambda: ok,
            "readyz": lambda: ok,
            "version": lambda: _json(_version_document()),
            "api": lambda: _json(api_versions_document(self.server_address)),
            "apis": lambda: _json(api_group_list_document(self.registry)),
        }

    @staticmethod
    def _split(segments: list[str]) -> tuple[str, str, str | None, list[str]] | None:
        """``(group, version, namespace, [plural, name?, subresource?])`` of a resource path."""
        if segments[0] == "api" and len(segments) >= 3:
            group, version, rest = "", segments[1], segments[2:]
        elif segments[0] == "apis" and len(segments) >= 4:
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            return None
        namespace: str | None = None
        # /api/v1/namespaces/NAME/status is the namespace's own subresource, not a collection in it.
        own_subresource = len(rest) == 3 and rest[2] in ("status", "finalize")
        if rest[0] == "namespaces" and len(rest) >= 3 and not own_subresource:
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            return None
        return group, version, namespace, rest

    def _route(self, request: Request, segments: list[str]) -> Route | None:
        parts = self._split(segments)
        if parts is None:
            return None
        group, version, namespace, rest = parts
        try:
            resource_type = self.registry.by_path(group, version, rest[0])
        except UnknownResourceError:
            return None
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        scope_ok = (namespace is None or resource_type.namespaced) and not (
            namespace is None and resource_type.namespaced and name is not None
        )
        known = {s.name for s in resource_type.subresources} | (
            {"status"} if resource_type.has_status else set()
        )
        if not scope_ok or (subresource is not None and subresource not in known):
            return None
        target = Target(resource_type, version, namespace, name, subresource)
        return Route(target, self._verb(request, target))

    @staticmethod
    def _verb(request: Request, target: Target) -> str:
        method = request.method
        if method == "GET":
            if target.name is not None:
                return "get"
            return "watch" if request.query_params.get("watch", "").lower() in _TRUE else "list"
        if method == "DELETE":
            return "delete" if target.name is not None else "deletecollection"
        return _VERB_BY_METHOD.get(method, method.lower())

    async def _dispatch(self, request: Request, route: Route) -> Response:
        target, verb = route.target, route.verb
        if target.subresource in ("eviction", "binding") or target.key == "bindings":
            return await self._dispatch_scheduling(request, route)
        if target.subresource is None and verb not in target.resource_type.verbs:
            raise errors.method_not_allowed()
        if target.subresource == "status" and verb not in ("get", "update", "patch"):
            raise errors.method_not_allowed()
        needs_name = verb in ("get", "update", "patch", "delete")
        if (target.name is None) == needs_name:
            raise errors.method_not_allowed()
        if verb == "create" and target.resource_type.namespaced and target.namespace is None:
            raise errors.method_not_allowed()
        handler = {
            "watch": self._on_watch,
            "list": self._on_list,
            "get": self._on_get,
            "create": self._on_create,
            "update": self._on_update,
            "patch": self._on_patch,
            "delete": self._on_delete,
            "deletecollection": self._on_delete,
        }.get(verb)
        if handler is None:
            raise errors.method_not_allowed()
        return await handler(request, target)

    async def _dispatch_scheduling(self, request: Request, route: Route) -> Response:
        """Evictions and bindings: create-only subresources (and the legacy ``bindings`` collection)."""
        target = route.target
        if route.verb != "create":
            raise errors.method_not_allowed()
        body = parse_json_body(await request.body())
        if target.key == "bindings":
            named = _require_named(body)
            pod = Target(
                self.registry.by_key("pods"), "v1", target.namespace, named["metadata"]["name"], "binding"
            )
            return _reply_response(self.api.bind(pod, named))
        reply = (
            self.api.evict(target, body) if target.subresource == "eviction" else self.api.bind(target, body)
        )
        return _reply_response(reply)

    async def _on_watch(self, request: Request, target: Target) -> Response:
        return self._watch(request, target)

    async def _on_list(self, request: Request, target: Target) -> Response:
        query = list_query(target, request.query_params.multi_items())
        return _reply_response(self.api.list_collection(target, query))

    async def _on_get(self, request: Request, target: Target) -> Response:
        return _reply_response(self.api.get(target))

    async def _on_create(self, request: Request, target: Target) -> Response:
        return _reply_response(self.api.create(target, parse_json_body(await request.body())))

    async def _on_update(self, request: Request, target: Target) -> Response:
        return _reply_response(self.api.replace(target, parse_json_body(await request.body())))

    async def _on_patch(self, request: Request, target: Target) -> Response:
        content_type = request.headers.get("content-type", "")
        field_manager = request.query_params.get("fieldManager")
        return _reply_response(self.api.patch(target, await request.body(), content_type, field_manager))

    async def _on_delete(self, request: Request, target: Target) -> Response:
        options = self._delete_options(request, await request.body())
        if target.name is not None:
            return _reply_response(self.api.delete(target, options))
        query = list_query(target, request.query_params.multi_items())
        return _reply_response(self.api.delete_collection(target, query, options))

    @staticmethod
    def _delete_options(request: Request, raw: bytes) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if raw.strip():
            body = parse_json_body(raw)
            if not isinstance(body, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
            options.update(body)
        grace = request.query_params.get("gracePeriodSeconds")
        if grace is not None and "gracePeriodSeconds" not in options:
            try:
                options["gracePeriodSeconds"] = int(grace)
            except ValueError:
                raise errors.bad_request(f"invalid gracePeriodSeconds: {grace}") from None
        return options

    def _watch(self, request: Request, target: Target) -> Response:
        params = request.query_params
        label_selector, field_selector = parse_selectors(
            target, params.get("labelSelector", ""), params.get("fieldSelector", "")
        )
        rv_text = params.get("resourceVersion", "")
        since_rv: int | None = None
        if rv_text not in ("", "0"):
            try:
                since_rv = int(rv_text)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {rv_text}") from None
        timeout_text = params.get("timeoutSeconds")
        try:
            timeout_s = float(timeout_text) if timeout_text else DEFAULT_WATCH_TIMEOUT_S
        except ValueError:
            raise errors.bad_request(f"invalid timeoutSeconds: {timeout_text}") from None
        watch_request = WatchRequest(
            resource_type=target.resource_type,
            version=target.version,
            namespace=target.namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            since_rv=since_rv,
            timeout_s=timeout_s,
            bookmarks=params.get("allowWatchBookmarks", "").lower() in _TRUE,
            send_initial_events=params.get("sendInitialEvents", "").lower() in _TRUE,
        )
        return StreamingResponse(
            watch_stream(self.api.store, watch_request, self.hub), media_type="application/json"
        )


class ApiServer(ThreadedHttpServer):
    """Runs :class:`KubeApp` under uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: KubeApp, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(
            app,
            host,
            port,
            thread_name="kube-sim-http",
            api_name="API server",
            on_start=self._open_watches,
            on_stop=app.hub.close_all,
        )

    def _open_watches(self) -> None:
        """Tell the app where it listens and let watches in again (the listener (re)starts)."""
        self.app.server_address = f"{self.host}:{self.port}"
        self.app.hub.closing = False
