"""The requests the executor makes about its node, JSON in and JSON out, counted.

The client's generated methods are typed for its model classes; we send plain JSON dicts (see ``bodies``)
and read raw JSON back (``_preload_content=False``: no model round-trip, no snake_case), so this module is
the one place where the client is used untyped.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

from kubernetes import client, watch

from remediation.kubernetes.names import EVENT_NAMESPACE
from remediation.kubernetes.node_view import JsonObject


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
        self._core: Any = client.CoreV1Api(api_client)
        self._field_manager = field_manager
        self._timeout = request_timeout_s
        self._lock = threading.Lock()
        self.requests_total = 0
        self.writes_total = 0

    def _count(self, *, mutating: bool) -> None:
        with self._lock:
            self.requests_total += 1
            if mutating:
                self.writes_total += 1

    def read(self) -> JsonObject:
        """GET the node."""
        self._count(mutating=False)
        response = self._core.read_node(
            self.node_name, _preload_content=False, _request_timeout=self._timeout
        )
        return _json(response)

    def list(self) -> tuple[JsonObject | None, str | None]:
        """LIST with a field selector on the node's name: (the node or None, the list's resourceVersion)."""
        self._count(mutating=False)
        response = self._core.list_node(
            field_selector=self.field_selector, _preload_content=False, _request_timeout=self._timeout
        )
        body = _json(response)
        items = body.get("items") or []
        version = (body.get("metadata") or {}).get("resourceVersion")
        return (items[0] if items else None), (str(version) if version is not None else None)

    @property
    def field_selector(self) -> str:
        """Selects this node only."""
        return f"metadata.name={self.node_name}"

    def patch(self, body: JsonObject) -> JsonObject:
        """Strategic merge patch of the node (the client's default for a dict body); returns the new node."""
        self._count(mutating=True)
        response = self._core.patch_node(
            self.node_name,
            body,
            field_manager=self._field_manager,
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        return _json(response)

    def patch_status(self, body: JsonObject) -> JsonObject:
        """Strategic merge patch of the node's ``status`` subresource; returns the new node."""
        self._count(mutating=True)
        response = self._core.patch_node_status(
            self.node_name,
            body,
            field_manager=self._field_manager,
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        return _json(response)

    def create_event(self, body: JsonObject) -> None:
        """POST a core/v1 Event in the node Events' namespace."""
        self._count(mutating=True)
        self._core.create_namespaced_event(
            EVENT_NAMESPACE,
            body,
            field_manager=self._field_manager,
            _preload_content=False,
            _request_timeout=self._timeout,
        )

    def watch(self, resource_version: str | None, timeout_s: int) -> NodeStream:
        """Open a watch of the node from ``resource_version`` that the server ends after ``timeout_s``."""
        self._count(mutating=False)
        return NodeStream(self, resource_version, timeout_s)

    def stream_events(self, stream: Any, resource_version: str | None, timeout_s: int) -> Iterator[Any]:
        """The client's ``Watch.stream`` over ``list_node`` with bookmarks (used by :class:`NodeStream`)."""
        kwargs: dict[str, Any] = {
            "field_selector": self.field_selector,
            "timeout_seconds": timeout_s,
            "allow_watch_bookmarks": True,
            # The server ends the watch after timeout_s; the read timeout only guards against a dead peer.
            "_request_timeout": (self._timeout, timeout_s + 30),
        }
        if resource_version is not None:
            kwargs["resource_version"] = resource_version
        events: Iterator[Any] = stream.stream(self._core.list_node, **kwargs)
        return events


class NodeStream:
    """One watch request: iterate its events (``type``, ``raw_object``); another thread may stop it."""

    def __init__(self, api: NodeApi, resource_version: str | None, timeout_s: int) -> None:
        watch_module: Any = watch  # untyped in the client
        self._watch: Any = watch_module.Watch()
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


def _json(response: Any) -> JsonObject:
    data = response.data
    parsed: JsonObject = json.loads(data) if data else {}
    return parsed
