"""The requests the executor makes about its node, JSON in and JSON out, counted.

Requests go through ``rest.RestClient`` on the REST paths directly, not through ``CoreV1Api`` (see ``rest``
for why). Bodies are plain JSON dicts (see ``bodies``) and answers are read as raw JSON: no model round-trip,
no snake_case.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from remediation.kubernetes.errors import api_error
from remediation.kubernetes.names import EVENT_NAMESPACE
from remediation.kubernetes.node_view import JsonObject
from remediation.kubernetes.rest import JSON, STRATEGIC_MERGE_PATCH, RestClient, Timeout, parse_json

NODE_PATH = "/api/v1/nodes/{name}"
NODE_STATUS_PATH = "/api/v1/nodes/{name}/status"
NODES_PATH = "/api/v1/nodes"
EVENTS_PATH = "/api/v1/namespaces/{namespace}/events"
# Watch events stay plain dicts: "object" is the client's name for "no model", and unlike no return type at
# all it still lets ``Watch`` track the resourceVersion of every object and bookmark it sees.
RAW_EVENTS = "object"


class NodeApi:
    """Reads and writes of one node (and its Events); ``requests_total`` / ``writes_total`` count them."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        *,
        field_manager: str,
        request_timeout_s: float,
    ) -> None:
        self.node_name = node_name
        self._rest = RestClient(api_client, request_timeout_s=request_timeout_s)
        self._field_manager = field_manager
        self._timeout = request_timeout_s

    @property
    def rest(self) -> RestClient:
        """The counted client, for the executor's other requests (device taints) to share the counts."""
        return self._rest

    @property
    def requests_total(self) -> int:
        """Every request sent (watches included)."""
        return self._rest.requests_total

    @property
    def writes_total(self) -> int:
        """Mutating requests sent."""
        return self._rest.writes_total

    def read(self) -> JsonObject:
        """GET the node."""
        return parse_json(self._request("GET", NODE_PATH))

    def list(self) -> tuple[JsonObject | None, str | None]:
        """LIST with a field selector on the node's name: (the node or None, the list's resourceVersion)."""
        body = parse_json(self.list_nodes(field_selector=self.field_selector))
        items = body.get("items") or []
        version = (body.get("metadata") or {}).get("resourceVersion")
        return (items[0] if items else None), (str(version) if version is not None else None)

    @property
    def field_selector(self) -> str:
        """Selects this node only."""
        return f"metadata.name={self.node_name}"

    def patch(self, body: JsonObject) -> JsonObject:
        """Strategic merge patch of the node; returns the new node."""
        return parse_json(self._write("PATCH", NODE_PATH, body, content_type=STRATEGIC_MERGE_PATCH))

    def patch_status(self, body: JsonObject) -> JsonObject:
        """Strategic merge patch of the node's ``status`` subresource; returns the new node."""
        return parse_json(self._write("PATCH", NODE_STATUS_PATH, body, content_type=STRATEGIC_MERGE_PATCH))

    def create_event(self, body: JsonObject) -> None:
        """POST a core/v1 Event in the node Events' namespace."""
        response = self._write("POST", EVENTS_PATH, body, content_type=JSON)
        # The created Event is not needed, but its body must be read before the connection can be reused.
        response.drain_conn()
        response.release_conn()

    def watch(self, resource_version: str | None, timeout_s: int) -> NodeStream:
        """Open a watch of the node from ``resource_version`` that the server ends after ``timeout_s``."""
        return NodeStream(self, resource_version, timeout_s)

    def stream_events(self, stream: Any, resource_version: str | None, timeout_s: int) -> Iterator[Any]:
        """The client's ``Watch.stream`` over :meth:`list_nodes`, with bookmarks (for :class:`NodeStream`)."""
        kwargs: dict[str, Any] = {
            "field_selector": self.field_selector,
            "timeout_seconds": timeout_s,
            "allow_watch_bookmarks": True,
            # The server ends the watch after timeout_s; the read timeout only guards against a dead peer.
            "_request_timeout": (self._timeout, timeout_s + 30),
        }
        if resource_version is not None:
            kwargs["resource_version"] = resource_version
        return _typed_errors(stream.stream(self.list_nodes, **kwargs))

    def list_nodes(
        self,
        *,
        field_selector: str,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_watch_bookmarks: bool = False,
        watch: bool = False,
        _preload_content: bool = False,
        _request_timeout: Timeout | None = None,
    ) -> Any:
        """GET /api/v1/nodes as an unread HTTP response, with ``list_node``'s keywords.

        ``Watch.stream`` calls it the way it calls the generated method: ``watch=True`` makes the answer a
        stream of events, and ``_preload_content`` is accepted because the watch passes it (the body is never
        read here in any case).
        """
        query: list[tuple[str, str]] = [("fieldSelector", field_selector)]
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        if timeout_seconds is not None:
            query.append(("timeoutSeconds", str(timeout_seconds)))
        if allow_watch_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        if watch:
            query.append(("watch", "true"))
        return self._request("GET", NODES_PATH, query=query, timeout=_request_timeout)

    def _write(self, method: str, path: str, body: JsonObject, *, content_type: str) -> Any:
        query = [("fieldManager", self._field_manager)]
        return self._request(method, path, query=query, body=body, content_type=content_type)

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request about this node (or its Events' namespace); the unread response on 2xx."""
        path_params = {"name": self.node_name, "namespace": EVENT_NAMESPACE}
        used = {key: value for key, value in path_params.items() if "{" + key + "}" in path}
        return self._rest.request(method, path, path_params=used, **kwargs)


class NodeStream:
    """One watch request: iterate its events (``type``, ``raw_object``); another thread may stop it."""

    def __init__(self, api: NodeApi, resource_version: str | None, timeout_s: int) -> None:
        watch_module: Any = watch  # untyped in the client
        self._watch: Any = watch_module.Watch(return_type=RAW_EVENTS)
        self._events = api.stream_events(self._watch, resource_version, timeout_s)
        self._start_version = resource_version

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for event in self._events:
            if isinstance(event, dict):
                yield event

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (objects and bookmarks), to resume from."""
        version = self._watch.resource_version
        return str(version) if version is not None else self._start_version

    def stop(self) -> None:
        """End the stream now (shuts its socket; the iterating thread sees the end at once)."""
        self._watch.stop()


def _typed_errors(events: Iterator[Any]) -> Iterator[Any]:
    """The events, with the client's own ``ApiException`` (a watch ERROR event: 410 Expired) typed."""
    try:
        yield from events
    except ApiException as error:
        raise api_error(error) from error
